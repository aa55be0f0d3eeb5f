"""Hostile input and faults against a real `tq serve` and real pilots.

Each test fails on the code before the hardening: a stored bad request that kept the TQ from
restarting, a task that killed every pilot taking it, a second producer of an LFN, unbounded and
unauthenticated bodies read whole, a killed pilot's task left running.
"""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from glidein_ext.errors import TaskQueueRequestError
from glidein_ext.testbed.tq_server import OPERATOR, PILOT, TqServer
from glidein_ext.tq.models import MatchSpec
from glidein_ext.tq.service.server import open_store
from glidein_ext.tq.service.settings import TqSettings
from glidein_ext.tq.workflow import TaskDef, WorkflowDef
from tests.support.background import BackgroundLoop
from tests.support.procs import child_named
from tests.support.rawhttp import post_json

MB = 2**20


def test_bad_requests_are_422_and_the_tq_restarts_on_its_database(
    tq_server: Callable[..., TqServer],
) -> None:
    """The two requests seen storing rows that kept `tq serve` from restarting."""
    server = tq_server()
    task = {"name": "t", "command": "true", "max_runtime": 10**30}
    code, text = post_json(server.url, "/api/v1/workflows", {"tasks": [task]}, OPERATOR)
    assert code == 422 and "max_runtime" in text, text
    pilot = {"site": "S", "host": "h", "requirements": "TARGET.Site == "}
    code, text = post_json(server.url, "/api/v1/pilots", pilot, PILOT)
    assert code == 422 and "requirements" in text, text
    server.kill(signal.SIGKILL)
    server.start()
    status = server.operator().status()
    assert status.workflows == () and status.pilots == {}
    assert "Traceback" not in server.log()


def test_a_second_producer_of_an_lfn_is_refused_in_one_line(
    tq_server: Callable[..., TqServer],
) -> None:
    """Through the API: the second workflow is refused naming both tasks and workflows."""
    client = tq_server().operator()
    client.submit({"name": "one", "tasks": [{"name": "a", "command": "true", "outputs": ["/o"]}]})
    with pytest.raises(TaskQueueRequestError) as info:
        client.submit(
            {"name": "two", "tasks": [{"name": "b", "command": "true", "outputs": ["/o"]}]}
        )
    message = str(info.value)
    assert "\n" not in message
    assert all(word in message for word in ("'a'", "'b'", "'one'", "'two'", "'/o'")), message
    assert len(client.status().workflows) == 1


def test_a_task_with_unusable_lfns_fails_and_the_pilot_goes_on(
    tmp_path: Path,
    tq_server: Callable[..., TqServer],
    pilots: Any,
    wait_until: Callable[..., Any],
) -> None:
    """LFNs an older TQ accepted (NUL, a 300-byte component) reach a pilot; each attempt
    fails as the task's (max_retries applies), the pilot runs the next task and stays up."""
    directory = tmp_path / "tq"
    settings = TqSettings(database=str(directory / "tq.sqlite"))
    directory.mkdir()
    store = open_store(settings)  # stored as the TQ of before the hardening let through
    bad = tuple(
        TaskDef(name, "true", MatchSpec(), outputs=(lfn,), max_retries=1)
        for name, lfn in (("nul", "/store/a\x00b"), ("long", "/store/" + "x" * 300))
    )
    store.submit(WorkflowDef("poison", bad))
    store.engine.dispose()
    server = tq_server("tq")
    client = server.operator()
    pilot = pilots.start(server.url, "survivor")
    wait_until(
        lambda: client.status().workflows[0].tasks["failed"] == 2, 60, "both bad tasks failed"
    )
    good = {"name": "t", "command": "sh -c 'echo ok > $TQ_OUTPUTS'", "outputs": ["/store/ok"]}
    client.submit({"name": "good", "tasks": [good]})
    wait_until(lambda: client.status().workflows[1].tasks["done"] == 1, 60, "the good task")
    assert pilot.poll() is None, pilots.log("survivor")
    assert client.status().pilots["T0"] == {"idle": 1}
    assert "Traceback" not in pilots.log("survivor")


def test_a_killed_pilots_task_dies_with_it(
    tq_server: Callable[..., TqServer], pilots: Any, wait_until: Callable[..., Any]
) -> None:
    """SIGKILL a real `glidein-ext pilot run` running a long task; its task process is gone
    within a few seconds (its task guardian kills it), not left to run beside its requeued copy."""
    server = tq_server()
    client = server.operator()
    client.submit({"tasks": [{"name": "long", "command": "sleep 300", "outputs": ["/o/long"]}]})
    pilot = pilots.start(server.url, "victim")
    wait_until(lambda: client.status().workflows[0].tasks["running"] == 1, 30, "the task to start")
    agent = psutil.Process(pilot.pid)
    # The task's process is `sleep` once it has exec'd: between fork and exec it is still named
    # after the agent (python3), so wait for the name, not for a child.
    task = wait_until(lambda: child_named(agent, "sleep"), 10, "the task's process (sleep)")
    pilot.send_signal(signal.SIGKILL)
    pilot.wait(timeout=10)
    started = time.monotonic()

    def task_gone() -> bool:
        try:
            return bool(task.status() == psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:
            return True

    wait_until(task_gone, 5, "the killed pilot's task to die")
    assert time.monotonic() - started < 5


def _peak_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


class _Latency(BackgroundLoop):
    """Polls /healthz from a thread; the slowest answer while it ran."""

    def __init__(self, server: TqServer) -> None:
        super().__init__("healthz-latency")
        self.server = server
        self.worst = 0.0
        self.answers = 0

    def step(self) -> None:
        started = time.monotonic()
        assert self.server.healthy()
        self.answers += 1
        self.worst = max(self.worst, time.monotonic() - started)
        time.sleep(0.02)


def _send_raw(url: str, head: bytes, size: int) -> bytes:
    """Send ``head`` then up to ``size`` bytes of body; the answer, whenever the server gives it."""
    host, port = url.removeprefix("http://").split(":")
    chunk = b" " * MB
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head)
        sent = 0
        try:
            while sent < size:
                sock.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed without reading the rest: the point
        try:
            return sock.recv(65536)
        except ConnectionResetError:
            return b""


def test_big_bodies_cost_nothing_without_a_token_and_are_capped_with_one(
    tq_server: Callable[..., TqServer],
) -> None:
    """A 150 MB unauthenticated POST is answered 401 unread; an authenticated body over the
    limit is 413 (by Content-Length, or as it streams); the server stays responsive and small."""
    server = tq_server(max_request_bytes=str(4 * MB))
    assert server.process is not None
    pid = server.process.pid
    before = _peak_rss_kb(pid)
    with _Latency(server) as latency:
        head = (
            b"POST /api/v1/workflows HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (150 * MB)
        )
        answer = _send_raw(server.url, head, 150 * MB)
        assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
        authed = head.replace(
            b"Host: x\r\n", f"Host: x\r\nAuthorization: Bearer {OPERATOR}\r\n".encode()
        )
        answer = _send_raw(server.url, authed, 150 * MB)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        chunked = (
            b"POST /api/v1/pilots HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + PILOT.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        framed = b"%x\r\n%s\r\n" % (MB, b" " * MB)
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(chunked)
            try:
                for _ in range(40):
                    sock.sendall(framed)
            except (BrokenPipeError, ConnectionResetError):
                pass
            answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    grown = _peak_rss_kb(pid) - before
    assert grown < 40 * 1024, f"tq serve grew by {grown} KB"
    assert latency.answers >= 1 and latency.worst < 1.0, latency.worst
    assert server.operator().status().workflows == ()
