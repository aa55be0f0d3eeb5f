"""The sandbox as a site and a VO run it: site execute nodes, and glideins that are site jobs.

Sfiligoi 2013's whole handshake needs both halves of glideinWMS: a *site pool* (the resource
provider's
batch system: its schedd, and execute nodes with the site snippet ``60-glidein-ext-site.config``,
whose startd cron publishes each pilot's ``.pilot.ad`` as ``PILOT_*``) and a *VO pool* (the
VO's collector, negotiator and schedd for its users).  A glidein is a job of the site pool whose
executable is ``glidein-ext wrapper``; the wrapper starts its own condor_master + startd in the
job's scratch directory (``$(EXECUTE)/dir_<starter pid>`` on the node, which is the glidein's
start directory), and that startd joins the VO pool (``--collector``).  A site execute node is a
condor_master (DAEMON_LIST = MASTER STARTD) with its own LOCAL_DIR inside the chroot, running as
the pool user, so its startd cron does too.  Test and demo helpers only; nothing here is used in
production.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glidein_ext.condor import JobStatus, startd_node_config
from glidein_ext.errors import CondorError
from glidein_ext.sandbox.pool import (
    GLIDEIN_BASE_CONFIG,
    VO_POOL,
    CondorSandbox,
    stop_process,
    wait_for,
    wrapper_command,
)
from glidein_ext.site.sandboxes import global_job_id

CHROOT_SRC = "/opt/glidein-ext/src"
CHROOT_BIN = "/opt/glidein-ext/bin/glidein-ext"
SITE_SNIPPET = f"{CHROOT_SRC}/glidein_ext/condor_config.d/60-glidein-ext-site.config"
NODE_ATTR = "GlideinExtSiteNode"
GLIDEIN_ATTR = "GlideinExtGlidein"  # on a glidein's site job: the glidein's name


def unique(name: str) -> str:
    """``name`` with a suffix no earlier run used, so stale collector ads never match."""
    return f"{name}-{os.getpid()}-{int(time.time() * 1000) % 100000}"


# --- execute nodes of the site pool ---


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
        "# Written by glidein_ext.sandbox.site: a site execute node of the sandbox's site pool.",
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


def launch_site_node(
    box: CondorSandbox,
    name: str,
    cpus: int = 4,
    *,
    cron_period: int = 5,
    extra_config: Sequence[str] = (),
) -> SiteNode:
    """Start the node's condor_master without waiting for it (see :func:`wait_site_node`)."""
    name = unique(name)
    local_dir = box.make_dir(name)
    box.run("mkdir", "-p", *(f"{local_dir}/{sub}" for sub in ("log", "execute", "spool")))
    config = f"{local_dir}/condor_config"
    box.write_file(config, render_node_config(name, local_dir, cpus, cron_period, extra_config))
    log_path = box.host_path(f"{local_dir}.master.log")
    process = box.spawn(["exec", "env", f"CONDOR_CONFIG={config}", "condor_master", "-f"], log_path)
    return SiteNode(name, local_dir, box.host_path(local_dir), process, log_path)


def wait_site_node(box: CondorSandbox, node: SiteNode) -> None:
    """Wait until the node's partitionable slot, with the cron's first run, is in the pool."""
    constraint = f'{NODE_ATTR} == "{node.name}" && GLIDEIN_EXT_SITE_CRON_OK =!= undefined'
    box.wait_joined(node.process, node.log_path, constraint, f"site node {node.name}", node.stop)


def start_site_node(
    box: CondorSandbox,
    name: str,
    cpus: int = 4,
    *,
    cron_period: int = 5,
    extra_config: Sequence[str] = (),
) -> SiteNode:
    """Start one node and wait until it is in the pool.  The name gets a unique suffix."""
    node = launch_site_node(box, name, cpus, cron_period=cron_period, extra_config=extra_config)
    wait_site_node(box, node)
    return node


def start_site_nodes(
    box: CondorSandbox, count: int, cpus: int, *, name: str = "node", cron_period: int = 5
) -> list[SiteNode]:
    """Start ``count`` nodes at once and wait for all of them (any failure stops them all)."""
    nodes = [
        launch_site_node(box, f"{name}{i}", cpus, cron_period=cron_period) for i in range(count)
    ]
    try:
        for node in nodes:
            wait_site_node(box, node)
    except CondorError:
        stop_site_nodes(nodes)
        raise
    return nodes


def stop_site_nodes(nodes: Iterable[SiteNode]) -> None:
    """Fast shutdown of every node at once (SIGQUIT to all, then wait; SIGKILL stragglers)."""
    nodes = list(nodes)
    for node in nodes:
        if node.running():
            node.process.send_signal(signal.SIGQUIT)
    for node in nodes:
        node.stop()


# --- glideins as site jobs ---


@dataclass(frozen=True)
class SiteUser:
    """A submitter of the site pool: HTCondor accounting group and user (group.user@domain).

    The sandbox's schedd runs as one Unix user, so site users are accounting groups.
    """

    group: str
    user: str

    @property
    def accounting_group(self) -> str:
        return f"{self.group}.{self.user}"

    def submit_lines(self) -> list[str]:
        return [f"accounting_group = {self.group}", f"accounting_group_user = {self.user}"]


FACTORY = SiteUser("vo", "pilot")  # the VO's factory: the site user its glideins run as


@dataclass(frozen=True)
class SiteGlidein:
    """A glidein submitted to the site pool's schedd: its name and site job id."""

    name: str
    cluster: int
    cpus: int
    proc: int = 0  # the PilotManager submits several glideins in one cluster

    @property
    def job_id(self) -> str:
        return f"{self.cluster}.{self.proc}"

    def site_constraint(self) -> str:
        """Its site job in the site pool's queue or history."""
        return f"ClusterId == {self.cluster} && ProcId == {self.proc}"

    def vo_constraint(self) -> str:
        """Its slots in the VO pool."""
        return f'GLIDEIN_ExtName == "{self.name}"'


def glidein_submit(
    name: str,
    cpus: int,
    *,
    memory_mb: int,
    requirements: str,
    user: SiteUser = FACTORY,
    wrapper_args: Sequence[str] = (),
    input_files: Sequence[str] = (),
) -> str:
    """The site job of one glidein (pure): ``glidein-ext wrapper`` in the job's scratch dir,
    its startd joining the VO pool.

    ``should_transfer_files = YES`` makes the job run in its scratch dir (the glidein's start dir,
    which the node's site cron reads); ``input_files`` (a pilot credential) go there with it;
    only the final ``.pilot.ad`` comes back.
    """
    args = [
        *wrapper_command(".", name, cpus, memory_mb),
        "--collector",
        VO_POOL.collector,
        *wrapper_args,
    ]
    lines = [
        f"executable = {CHROOT_BIN}",
        "transfer_executable = false",
        f'arguments = "{" ".join(args)}"',
        # A batch job gets no PATH of its own; the factory says where HTCondor's binaries are.
        'environment = "PATH=/usr/sbin:/usr/bin:/sbin:/bin"',
        "should_transfer_files = YES",
        *([f"transfer_input_files = {','.join(input_files)}"] if input_files else []),
        "when_to_transfer_output = ON_EXIT",
        "transfer_output_files = .pilot.ad",
        f"output = {name}.out",
        f"error = {name}.err",
        f"log = {name}.log",
        f"request_cpus = {cpus}",
        f"request_memory = {memory_mb}",
        "request_disk = 102400",
        *user.submit_lines(),
        f'+{GLIDEIN_ATTR} = "{name}"',
        f"requirements = {requirements}",
        "queue",
    ]
    return "\n".join(lines) + "\n"


def submit_glideins(
    site: CondorSandbox,
    directory: str,
    count: int,
    cpus: int,
    nodes: Iterable[SiteNode],
    *,
    name: str = "glidein",
    memory_mb: int = 512,
    user: SiteUser = FACTORY,
    wrapper_args: Sequence[str] = (),
    per_glidein_args: Sequence[Sequence[str]] = (),
    input_files: Sequence[str] = (),
) -> list[SiteGlidein]:
    """Submit ``count`` glideins (one site job each) pinned to ``nodes``; ``per_glidein_args``
    adds wrapper arguments to the i-th one."""
    requirements = " || ".join(f"({n.requirements()})" for n in nodes)
    glideins = []
    for i in range(count):
        gname = unique(f"{name}{i}")
        extra = [*wrapper_args, *(per_glidein_args[i] if i < len(per_glidein_args) else ())]
        text = glidein_submit(
            gname,
            cpus,
            memory_mb=memory_mb,
            requirements=requirements,
            user=user,
            wrapper_args=extra,
            input_files=input_files,
        )
        glideins.append(SiteGlidein(gname, site.submit(directory, gname, text), cpus))
    return glideins


def site_job(site: CondorSandbox, glidein: SiteGlidein) -> dict[str, Any] | None:
    """The glidein's site job ad: from the queue, else from the history."""
    constraint = glidein.site_constraint()
    found = site.queue(constraint) or site.history(constraint)
    return found[0] if found else None


def wait_glideins_joined(
    site: CondorSandbox, glideins: Sequence[SiteGlidein], timeout: float = 180
) -> dict[str, list[dict[str, Any]]]:
    """Wait until every glidein's startd is in the VO pool, its cron having run once; its slot
    ads by glidein name.  A glidein whose site job left the queue fails at once."""
    vo = site.on(VO_POOL)
    names = " || ".join(f'GLIDEIN_ExtName == "{g.name}"' for g in glideins)

    def joined() -> dict[str, list[dict[str, Any]]] | None:
        ads = vo.status(f"({names}) && GLIDEIN_RetireNow =!= undefined")
        by_name: dict[str, list[dict[str, Any]]] = {}
        for ad in ads:
            by_name.setdefault(str(ad.get("GLIDEIN_ExtName")), []).append(ad)
        if len(by_name) == len(glideins):
            return by_name
        queued = site.queue(f"{GLIDEIN_ATTR} =!= undefined")
        alive = {(int(j["ClusterId"]), int(j["ProcId"])) for j in queued}
        gone = [g.name for g in glideins if (g.cluster, g.proc) not in alive]
        if gone:
            raise CondorError(f"glidein site jobs left the queue before joining: {gone}")
        return None

    return wait_for(joined, timeout, f"{len(glideins)} glideins in the VO pool", interval=2.0)


def glidein_sandbox(nodes: Iterable[SiteNode], global_job_id_: str) -> Path | None:
    """The host path of the scratch dir (the glidein's start dir) of a running site job."""
    for node in nodes:
        for path in sorted((node.host_dir / "execute").glob("dir_*")):
            if global_job_id(str(path)) == global_job_id_:
                return path
    return None


def running_glideins(site: CondorSandbox, glideins: Sequence[SiteGlidein]) -> set[str]:
    """Names of the glideins whose site job is running."""
    clusters = " || ".join(f"ClusterId == {g.cluster}" for g in glideins)
    jobs = site.queue(f"({clusters}) && JobStatus == {JobStatus.RUNNING.value}")
    by_job = {(g.cluster, g.proc): g.name for g in glideins}
    return {by_job[key] for j in jobs if (key := (int(j["ClusterId"]), int(j["ProcId"]))) in by_job}


# --- VO users' jobs, in the VO pool ---


@dataclass(frozen=True)
class VoJob:
    """A VO user's sleep job for one glidein: seconds, CPUs, estimated minutes, and its own
    MaxWallTimeMins (None: the submission's)."""

    seconds: int
    cpus: int = 1
    estimate_min: int = 1
    max_wall_min: int | None = None


def vo_job_submit(
    tag: str,
    glidein: str,
    jobs: Sequence[VoJob],
    *,
    tag_attribute: str = "GlideinExtVoJob",
    max_wall_min: int = 60,
) -> str:
    """Submit text for sleep jobs pinned to one glidein, each with its runtime estimate and
    limit (``max_wall_min`` where a job names none), marked ``<tag_attribute> = "<tag>"`` to find
    them again (pure)."""

    def row(job: VoJob) -> str:
        limit = max_wall_min if job.max_wall_min is None else job.max_wall_min
        return f"  {job.seconds}, {job.cpus}, {job.estimate_min}, {limit}"

    rows = "\n".join(row(j) for j in jobs)
    return f"""\
executable = /bin/sleep
arguments = $(secs)
request_cpus = $(cpus)
request_memory = 64
request_disk = 1024
should_transfer_files = NO
+EstimatedWallTimeMins = $(est)
+MaxWallTimeMins = $(maxm)
+{tag_attribute} = "{tag}"
requirements = TARGET.GLIDEIN_ExtName =?= "{glidein}"
log = {tag}.log
queue secs, cpus, est, maxm from (
{rows}
)
"""


def submit_vo_jobs(
    vo: CondorSandbox, directory: str, tag: str, glidein: SiteGlidein, jobs: Sequence[VoJob]
) -> int:
    """Submit VO jobs for ``glidein`` to the VO schedd; the cluster id."""
    return vo.submit(directory, tag, vo_job_submit(tag, glidein.name, jobs))


def set_priority_factor(site: CondorSandbox, user: SiteUser, factor: float) -> str:
    """Set a site user's priority factor at the site negotiator (as the pool's administrator:
    HTCondor's ``condor_userprio -setfactor``); returns the submitter name it applied to."""
    domain = site.run("condor_config_val", "UID_DOMAIN").strip()
    submitter = f"{user.accounting_group}@{domain}"
    site.run("condor_userprio", "-setfactor", submitter, f"{factor:g}")
    return submitter
