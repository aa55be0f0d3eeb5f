"""The real Task Queue service and real pilot agents, as subprocesses on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from glidein_ext.errors import CondorError
from glidein_ext.sandbox.pool import wait_for
from glidein_ext.testbed.tq_server import TqServer, tq_env
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.protocol import Status


@pytest.fixture
def tq_server(tmp_path: Path) -> Iterator[Callable[..., TqServer]]:
    """Start ``tq serve`` processes (``TqServer``'s arguments; ``name``: its own directory);
    every one is stopped at the end of the test."""
    servers: list[TqServer] = []

    def start(name: str = "", **options: Any) -> TqServer:
        server = TqServer(tmp_path / name if name else tmp_path, **options)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


class Pilots:
    """Pilot agent subprocesses; every one is stopped at the end of the test."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.se_dir = tmp_path / "se"
        self.se_dir.mkdir(exist_ok=True)
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, url: str, name: str, *args: str, site: str = "T0", host: str = "") -> Any:
        workdir = self.tmp_path / "pilots" / name
        workdir.mkdir(parents=True)
        log = open(workdir.with_suffix(".log"), "wb")  # noqa: SIM115 (closed below)
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "glidein_ext",
                "pilot",
                "run",
                "--tq",
                url,
                "--site",
                site,
                "--workdir",
                str(workdir),
                "--se-dir",
                str(self.se_dir),
                "--poll",
                "0.3",
                "--min-free-mb",
                "1",
                "-v",
                "--host",
                host or name,
                *args,
            ],
            env=tq_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        self.processes.append(process)
        return process

    def log(self, name: str) -> str:
        return (self.tmp_path / "pilots" / f"{name}.log").read_text(errors="replace")

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def pilots(tmp_path: Path) -> Iterator[Pilots]:
    group = Pilots(tmp_path)
    yield group
    group.stop_all()


def wait_until(probe: Callable[[], Any], timeout: float, what: str) -> Any:
    """``probe()`` once it is truthy, polled every 0.3 s; AssertionError after ``timeout``."""
    try:
        return wait_for(probe, timeout, what, interval=0.3)
    except CondorError as exc:  # sandbox.wait_for's timeout: here, a failed test
        raise AssertionError(str(exc)) from None


def all_finished(client: TqClient) -> Status | None:
    status = client.status()
    for wf in status.workflows:
        if wf.tasks["waiting"] + wf.tasks["queued"] + wf.tasks["running"]:
            return None
    return status


@pytest.fixture(name="wait_until")
def wait_until_fixture() -> Callable[[Callable[[], Any], float, str], Any]:
    return wait_until


@pytest.fixture(name="all_finished")
def all_finished_fixture() -> Callable[[TqClient], Status | None]:
    return all_finished


def cached_file(workdir: Path, lfn: str) -> Path:
    """The file a pilot agent (workdir) holds in its cache for ``lfn``; fails if it has none."""
    path = workdir / "cache" / "data" / lfn.lstrip("/")
    assert path.is_file(), f"{lfn} is not in the cache of {workdir}"
    return path


@pytest.fixture(name="cached_file")
def cached_file_fixture() -> Callable[[Path, str], Path]:
    return cached_file


# The host's htcondor2 speaks to the chroot's schedd as the pool user (test pool only: it
# accepts CLAIMTOBE on loopback).
CLAIM = {
    "_CONDOR_SEC_CLIENT_AUTHENTICATION_METHODS": "CLAIMTOBE",
    "_CONDOR_SEC_CLAIMTOBE_USER": "glidein",
}


@pytest.fixture
def claim_to_be_glidein(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The host's htcondor2 speaks to the chroot's schedd as its user (test pool only)."""
    import htcondor2

    for key, value in CLAIM.items():
        monkeypatch.setenv(key, value)
    htcondor2.reload_config()
    yield
    monkeypatch.undo()
    htcondor2.reload_config()
