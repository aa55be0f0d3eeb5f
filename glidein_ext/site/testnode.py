"""A site execute node inside the chroot pool, for tests and demos (never used in production).

The pool has no startd of its own; this starts a second condor_master (DAEMON_LIST = MASTER
STARTD) with its own LOCAL_DIR, the glidein base configuration, and the site snippet
``condor_config.d/60-glidein-ext-site.config`` with the propagate cron.  It runs as the pool user,
so the cron runs as that user too (HTCondor refuses to run jobs as root).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glidein_ext.errors import CondorError
from glidein_ext.sandbox import GLIDEIN_BASE_CONFIG, CondorSandbox, wait_for

CHROOT_SRC = "/opt/glidein-ext/src"
CHROOT_BIN = "/opt/glidein-ext/bin/glidein-ext"
SITE_SNIPPET = f"{CHROOT_SRC}/glidein_ext/condor_config.d/60-glidein-ext-site.config"
NODE_ATTR = "GlideinExtSiteNode"


@dataclass
class SiteNode:
    """One execute node: its name, LOCAL_DIR (chroot path) and condor_master process."""

    name: str
    local_dir: str
    host_dir: Path
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def execute_dir(self) -> str:
        return f"{self.local_dir}/execute"

    @property
    def config(self) -> str:
        return f"{self.local_dir}/condor_config"

    def requirements(self) -> str:
        """A job Requirements expression that pins a job to this node."""
        return f'TARGET.{NODE_ATTR} =?= "{self.name}"'

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """Fast shutdown of the node's master (SIGQUIT), then SIGKILL."""
        for sig, grace in ((signal.SIGQUIT, 20.0), (signal.SIGKILL, 10.0)):
            if self.process.poll() is not None:
                return
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                continue


def render_node_config(
    name: str, local_dir: str, cpus: int, cron_period: int, extra: Sequence[str] = ()
) -> str:
    """The node's condor_config (pure)."""
    lines = [
        "# Written by glidein_ext.site.testnode: a site execute node for tests.",
        f"include : {GLIDEIN_BASE_CONFIG}",
        "LOCAL_CONFIG_FILE =",
        "LOCAL_CONFIG_DIR =",
        f"LOCAL_DIR = {local_dir}",
        "LOG = $(LOCAL_DIR)/log",
        "EXECUTE = $(LOCAL_DIR)/execute",
        "SPOOL = $(LOCAL_DIR)/spool",
        "LOCK = $(LOG)",
        "RUN = $(LOG)",
        "DAEMON_LIST = MASTER STARTD",
        "USE_SHARED_PORT = False",
        f"MASTER_NAME = {name}",
        f"STARTD_NAME = {name}",
        f"NUM_CPUS = {cpus}",
        f"MEMORY = {256 * cpus}",
        "NUM_SLOTS = 1",
        "NUM_SLOTS_TYPE_1 = 1",
        "SLOT_TYPE_1 = cpus=100%, mem=100%, disk=100%, swap=100%",
        "SLOT_TYPE_1_PARTITIONABLE = True",
        "BENCHMARKS_JOBLIST =",
        "RunBenchmarks = False",
        "START = True",
        f'{NODE_ATTR} = "{name}"',
        f"STARTD_ATTRS = $(STARTD_ATTRS) {NODE_ATTR}",
        f"GLIDEIN_EXT_SITE_BIN = {CHROOT_BIN}",
        f"GLIDEIN_EXT_SITE_CRON_PERIOD = {cron_period}",
        # A site that lets its negotiator preempt by priority (HTCondor 23's default is false);
        # the snippet only narrows it.
        "PREEMPTION_REQUIREMENTS = True",
        f"include : {SITE_SNIPPET}",
        *extra,
    ]
    return "\n".join(lines) + "\n"


def start_site_node(
    box: CondorSandbox,
    name: str,
    cpus: int = 4,
    *,
    cron_period: int = 5,
    extra_config: Sequence[str] = (),
) -> SiteNode:
    """Start the node and wait until its partitionable slot, with the cron's first run, is in
    the pool.  The name gets a unique suffix so stale collector ads never match."""
    name = f"{name}-{os.getpid()}-{int(time.time() * 1000) % 100000}"
    local_dir = box.make_dir(name)
    for sub in ("log", "execute", "spool"):
        box.run("mkdir", "-p", f"{local_dir}/{sub}")
    config = f"{local_dir}/condor_config"
    box.write_file(config, render_node_config(name, local_dir, cpus, cron_period, extra_config))
    log_path = box.host_path(f"{local_dir}.master.log")
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(box.script), "exec", "env", f"CONDOR_CONFIG={config}", "condor_master", "-f"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    node = SiteNode(name, local_dir, box.host_path(local_dir), process, log_path)

    def joined() -> list[dict[str, Any]]:
        if not node.running():
            raise CondorError(f"site node {name} exited: {log_path.read_text()[-500:]}")
        return box.status(f'{NODE_ATTR} == "{name}" && GLIDEIN_EXT_SITE_CRON_OK =!= undefined')

    try:
        wait_for(joined, 90, f"site node {name} in condor_status")
    except CondorError:
        node.stop()
        raise
    return node
