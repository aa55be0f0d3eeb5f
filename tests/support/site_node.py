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

from glidein_ext.condor import startd_node_config
from glidein_ext.sandbox import GLIDEIN_BASE_CONFIG, CondorSandbox, stop_process

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
        stop_process(self.process, ((signal.SIGQUIT, 20.0), (signal.SIGKILL, 10.0)))


def render_node_config(
    name: str, local_dir: str, cpus: int, cron_period: int, extra: Sequence[str] = ()
) -> str:
    """The node's condor_config (pure)."""
    lines = [
        "# Written by tests.support.site_node: a site execute node for tests.",
        *startd_node_config(name, local_dir, cpus, 256 * cpus, base_config=GLIDEIN_BASE_CONFIG),
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
    process = box.spawn(["exec", "env", f"CONDOR_CONFIG={config}", "condor_master", "-f"], log_path)
    node = SiteNode(name, local_dir, box.host_path(local_dir), process, log_path)
    constraint = f'{NODE_ATTR} == "{name}" && GLIDEIN_EXT_SITE_CRON_OK =!= undefined'
    box.wait_joined(process, log_path, constraint, f"site node {name}", node.stop)
    return node
