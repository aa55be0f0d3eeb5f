"""The real Task Queue service and real pilot agents, as subprocesses on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from glidein_ext.errors import TaskQueueError
from glidein_ext.tq.client import TqClient

OPERATOR = "op-secret"
PILOT = "pilot-secret"


def env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "GLIDEIN_EXT_TQ_OPERATOR_TOKEN": OPERATOR,
        "GLIDEIN_EXT_TQ_PILOT_TOKEN": PILOT,
        **extra,
    }


class TqServer:
    """``glidein-ext tq serve`` in a subprocess this test owns."""

    def __init__(self, directory: Path, **settings: str) -> None:
        self.directory = directory
        self.database = directory / "tq.sqlite"
        self.settings = {f"GLIDEIN_EXT_TQ_{k.upper()}": v for k, v in settings.items()}
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        port_file = self.directory / "port"
        port_file.unlink(missing_ok=True)
        log = open(self.directory / "serve.log", "ab")  # noqa: SIM115 (closed with the process)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "glidein_ext",
                "tq",
                "serve",
                "--database",
                str(self.database),
                "--port",
                str(self.port),
                "--port-file",
                str(port_file),
            ],
            env=env(**self.settings),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError((self.directory / "serve.log").read_text())
            time.sleep(0.1)
        self.port = int(port_file.read_text())
        while True:
            try:
                self.operator().status()
                return
            except TaskQueueError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def operator(self) -> TqClient:
        return TqClient(self.url, OPERATOR, timeout=10)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)


@pytest.fixture
def tq_server(tmp_path: Path) -> Iterator[Callable[..., TqServer]]:
    servers: list[TqServer] = []

    def start(**settings: str) -> TqServer:
        server = TqServer(tmp_path, **settings)
        server.start()
        servers.append(server)
        return server

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
            env=env(),
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
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.3)


def all_finished(client: TqClient) -> dict[str, Any] | None:
    status = client.status()
    for wf in status["workflows"]:
        tasks = wf["tasks"]
        if tasks["waiting"] + tasks["queued"] + tasks["running"]:
            return None
    return status


@pytest.fixture(name="wait_until")
def wait_until_fixture() -> Callable[[Callable[[], Any], float, str], Any]:
    return wait_until


@pytest.fixture(name="all_finished")
def all_finished_fixture() -> Callable[[TqClient], dict[str, Any] | None]:
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
