"""A Task Queue and a site of pilots as local processes on 127.0.0.1: the embedded default.

``LocalTaskQueue`` runs ``glidein-ext tq serve`` on a SQLite file (port 0, the bound port read
from ``--port-file``) with two random tokens of its own; ``LocalSite`` runs ``glidein-ext pilot
run --pilots N`` processes against it (or against the testbed's ``TqServer``), one process per
simulated worker node (its pilots share that host's cache, Hasham 2011 §IV-C), every pilot joining
the site's DHT (Delgado Peris 2014 §III.A).  Both are context managers that stop what they started
(SIGTERM, then SIGKILL) and leave nothing running. The main demo uses them; a researcher can too
(``docs/architectures.md``); the testbed's site runs are a ``LocalSite`` on a ``TqServer``.
The functions below start ``tq serve`` (``start_tq_serve``) and watch such a site through the
operator's client (pilots alive, a workflow to its end, its counters); the testbed's Task Queue
server and site runs use them too.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from glidein_ext.errors import GlideinExtError, TaskQueueError
from glidein_ext.procs import Running
from glidein_ext.sandbox.pool import stop_process
from glidein_ext.tq.client.client import TqClient

START_TIMEOUT = 60.0


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "glidein_ext", *args]


@dataclass
class LocalTaskQueue(Running):
    """``tq serve`` on ``directory/tq.sqlite``; ``url`` and ``operator()`` once started."""

    directory: Path
    architecture: str = "distributed"
    args: Sequence[str] = ()
    operator_token: str = field(default_factory=lambda: secrets.token_hex(16))
    pilot_token: str = field(default_factory=lambda: secrets.token_hex(16))
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "tq-serve.log"

    def environment(self) -> dict[str, str]:
        return {
            **os.environ,
            "GLIDEIN_EXT_TQ_OPERATOR_TOKEN": self.operator_token,
            "GLIDEIN_EXT_TQ_PILOT_TOKEN": self.pilot_token,
        }

    def operator(self, timeout: float = 60) -> TqClient:
        return TqClient(self.url, self.operator_token, timeout=timeout)

    def start(self) -> LocalTaskQueue:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process, self.port = start_tq_serve(
            [
                *("--database", str(self.directory / "tq.sqlite"), "--port", "0"),
                *("--architecture", self.architecture, *self.args),
            ],
            self.environment(),
            self.log_path,
            self.directory / "tq.port",
            self._answers,
            lambda: f"(log {self.log_path}) {self.log_path.read_text(errors='replace')[-2000:]}",
        )
        return self

    def _answers(self, port: int) -> bool:
        try:
            TqClient(f"http://127.0.0.1:{port}", self.operator_token, timeout=5).status()
        except TaskQueueError:
            return False
        return True

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, [(signal.SIGTERM, 30), (signal.SIGKILL, 10)])


class TaskQueueProcess(Protocol):
    """What a site of pilots needs of its Task Queue (``LocalTaskQueue``, the testbed's
    ``TqServer``): its URL, the pilots' token and an operator's client."""

    pilot_token: str

    @property
    def url(self) -> str: ...

    def operator(self, timeout: float = ...) -> TqClient: ...


@dataclass
class LocalSite(Running):
    """Pilot processes on ``tq``, one per simulated worker node: ``wnN`` runs ``hosts[N]`` pilots
    at ``sites[N % len(sites)]``.

    ``shared_caches``: a node's pilots share its cache (Hasham 2011 §IV-C), else each pilot is a
    host of its own; ``master_first``: the other nodes start once a pilot of the first registered,
    so that it is the site's master (Delgado Peris 2014 §III.A); ``with_se``: pilots read inputs
    from and write outputs to ``se_dir``, else outputs stay in their caches; ``explain``: what a
    failure to register shows (by default where the logs are); ``verbose``: the pilots log at
    INFO (``-v``: each task's start), which a bench timing them turns off.
    """

    tq: TaskQueueProcess
    directory: Path
    hosts: Sequence[int] = (4, 4, 4)
    sites: Sequence[str] = ("T2_Local",)
    pilot_args: Sequence[str] = ()
    shared_caches: bool = True
    master_first: bool = True
    with_se: bool = True
    register_timeout: float = 120.0
    kill_after: float = 10.0
    explain: Callable[[], str] | None = None
    verbose: bool = True
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def se_dir(self) -> Path:
        """The storage element every pilot reads inputs from and writes outputs to."""
        return self.directory / "se"

    @property
    def pilots(self) -> int:
        return sum(self.hosts)

    def start(self) -> LocalSite:
        self.se_dir.mkdir(parents=True, exist_ok=True)
        try:
            for host, pilots in enumerate(self.hosts):
                self.procs.append(self._start(host, pilots))
                if host == 0 and self.master_first:  # the first pilot to register is the master
                    self.wait_registered(1)
            self.wait_registered(self.pilots)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, host: int, pilots: int) -> subprocess.Popen[bytes]:
        workdir = self.directory / f"wn{host}"
        workdir.mkdir(parents=True, exist_ok=True)
        site = self.sites[host % len(self.sites)]
        with open(self.directory / f"wn{host}.log", "ab") as log:
            return subprocess.Popen(
                _command(
                    *("pilot", "run", "--tq", self.tq.url, "--site", site),
                    *("--workdir", str(workdir), "--host", f"wn{host}"),
                    *(("--se-dir", str(self.se_dir)) if self.with_se else ()),
                    *("--min-free-mb", "1", "--pilots", str(pilots)),
                    *(("--pilots-per-host", str(pilots)) if self.shared_caches else ()),
                    *("--poll", "1", "--poll-max", "4"),
                    *("--cache-max-space", "200M", "--cache-min-threshold", "0"),
                    *(("-v",) if self.verbose else ()),
                    *self.pilot_args,
                ),
                env={
                    **os.environ,
                    "GLIDEIN_EXT_TQ_OPERATOR_TOKEN": "",
                    "GLIDEIN_EXT_TQ_PILOT_TOKEN": self.tq.pilot_token,
                },
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def registered(self) -> int:
        """Pilots of this site the Task Queue knows alive (idle or busy)."""
        return pilots_alive(self.tq.operator(timeout=60), self.sites)

    def wait_registered(self, count: int) -> None:
        wait_pilots(
            self.tq.operator(timeout=60),
            self.sites,
            count,
            self.register_timeout,
            self.procs,
            self.explain or (lambda: f"see {self.directory}/wn*.log"),
        )

    def stop(self) -> None:
        """SIGTERM: each pilot finishes, leaves the DHT (Delgado Peris 2014 LEAVE) and
        deregisters."""
        stop_pilots(self.procs, kill_after=self.kill_after)


def start_tq_serve(
    args: Sequence[str],
    env: Mapping[str, str],
    log_path: Path,
    port_file: Path,
    answers: Callable[[int], bool],
    logs: Callable[[], str],
    timeout: float = START_TIMEOUT,
) -> tuple[subprocess.Popen[bytes], int]:
    """Run ``glidein-ext tq serve ARGS --port-file PORT_FILE`` (its output appended to
    ``log_path``); wait until it wrote the port it bound and ``answers(port)``.  The process and
    its port; GlideinExtError (with ``logs()``, the process stopped) if it exits or ``timeout``
    seconds pass first."""
    port_file.unlink(missing_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            _command("tq", "serve", *args, "--port-file", str(port_file)),
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    deadline = time.monotonic() + timeout

    def check_alive(what: str) -> None:
        if process.poll() is not None or time.monotonic() > deadline:
            raise GlideinExtError(f"tq serve {what}: {logs()}")

    try:
        while not port_file.exists():  # written whole (renamed into place) once bound
            check_alive("did not bind its port")
            time.sleep(0.1)
        port = int(port_file.read_text())
        while not answers(port):
            check_alive("does not answer")
            time.sleep(0.1)
    except BaseException:
        stop_process(process, [(signal.SIGTERM, 30), (signal.SIGKILL, 10)])
        raise
    return process, port


def pilots_alive(operator: TqClient, sites: Iterable[str]) -> int:
    """Pilots of ``sites`` the Task Queue knows alive (idle or busy)."""
    pilots = operator.status().pilots
    found = [pilots.get(site, {}) for site in sites]
    return int(sum(site.get("idle", 0) + site.get("busy", 0) for site in found))


def wait_pilots(
    operator: TqClient,
    sites: Iterable[str],
    count: int,
    timeout: float,
    procs: Sequence[subprocess.Popen[bytes]],
    logs: Callable[[], str],
) -> None:
    """Wait until ``count`` pilots of ``sites`` registered; GlideinExtError (with ``logs()``)
    if one of ``procs`` exited or ``timeout`` seconds passed first."""
    sites = list(sites)
    deadline = time.monotonic() + timeout
    while pilots_alive(operator, sites) < count:
        if any(process.poll() is not None for process in procs):
            raise GlideinExtError(f"a pilot process exited: {logs()}")
        if time.monotonic() > deadline:
            alive = pilots_alive(operator, sites)
            raise GlideinExtError(f"{alive} of {count} pilots registered: {logs()}")
        time.sleep(0.3)


def wait_workflow(
    operator: TqClient,
    workflow_id: int,
    name: str,
    timeout: float,
    interval: float,
    progress: Callable[[dict[str, int]], None],
    logs: Callable[[], str],
) -> dict[str, int]:
    """Poll the Task Queue until every task of the workflow ended (done or failed); its task
    counts by state, each poll's given to ``progress``.  GlideinExtError (with ``logs()``) after
    ``timeout`` seconds."""
    started = time.monotonic()
    while True:
        (found,) = [w for w in operator.status().workflows if w.id == workflow_id]
        counts = dict(found.tasks)
        progress(counts)
        if counts.get("done", 0) + counts.get("failed", 0) == sum(counts.values()):
            return counts
        if time.monotonic() - started > timeout:
            raise GlideinExtError(f"{name} did not finish in {timeout:.0f} s: {counts} {logs()}")
        time.sleep(interval)


def workflow_counters(operator: TqClient, workflow_id: int) -> dict[str, Any]:
    """The Task Queue's counters of one workflow (``GET /api/v1/counters``, Delgado Peris 2014
    §IV)."""
    counters = operator.call("GET", "/api/v1/counters")
    for found in counters.get("workflows", []):
        if found.get("id") == workflow_id:
            return dict(found)
    raise TaskQueueError(f"the Task Queue has no counters for workflow {workflow_id}")


def stop_pilots(procs: Iterable[subprocess.Popen[bytes]], kill_after: float) -> None:
    """SIGTERM to every pilot process at once; each one's SIGKILL 60 s later, ``kill_after``
    seconds before giving up on it."""
    procs = list(procs)
    for process in procs:
        process.send_signal(signal.SIGTERM)  # nothing if it has exited (and been reaped)
    for process in procs:
        stop_process(process, [(signal.SIGTERM, 60), (signal.SIGKILL, kill_after)])
