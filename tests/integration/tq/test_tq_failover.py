"""Clients with several Task Queue URLs (Lee 2003: equal instances, no single point of failure):
real pilot agents ride out an instance SIGKILLed under them; a failing instance is throttled.

Two ``tq serve`` instances share one PostgreSQL database (``tests.support.postgres``); the pilots
and the operator are given both URLs and fail over (``tq.client.endpoints``, ``tq.client.client``).
"""

from __future__ import annotations

import http.server
import itertools
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from glidein_ext.errors import TaskQueueError
from glidein_ext.testbed.tq_server import OPERATOR, TqServer
from glidein_ext.tq.client.client import TqClient
from tests.support.postgres import pg_server, pg_url

# CPU-heavy: runs in one xdist worker with the other heavy tests (tests/conftest.py).
pytestmark = pytest.mark.heavy

__all__ = ["pg_server", "pg_url"]  # fixtures, used by name

TASKS = 48


def _done(client: TqClient) -> int:
    return sum(wf.tasks["done"] for wf in client.status().workflows)


def _watch(client: TqClient, until: int, timeout: float = 90) -> list[tuple[float, int]]:
    """(time, tasks done) at each change, until ``until`` are done."""
    progress = [(time.monotonic(), _done(client))]
    deadline = progress[0][0] + timeout
    while progress[-1][1] < until and time.monotonic() < deadline:
        time.sleep(0.1)
        count = _done(client)
        if count != progress[-1][1]:
            progress.append((time.monotonic(), count))
    assert progress[-1][1] >= until, f"only {progress[-1][1]} done: {progress}"
    return progress


def _stall(progress: list[tuple[float, int]]) -> float:
    """The longest pause between two completions seen (0 when only one count was seen)."""
    gaps = (later[0] - earlier[0] for earlier, later in itertools.pairwise(progress))
    return max(gaps, default=0.0)


def _first(progress: list[tuple[float, int]]) -> float:
    """Seconds to the first completion seen after the watch began (0 when none was needed)."""
    return progress[1][0] - progress[0][0] if len(progress) > 1 else 0.0


def test_pilots_keep_working_when_an_instance_is_killed(
    pg_url: str,
    tq_server: Callable[..., TqServer],
    pilots: Any,
    wait_until: Callable[..., Any],
) -> None:
    """Each instance is SIGKILLed in turn (the first restarted in between) under three pilot
    agents given both URLs; the completions never pause long, every task is done once."""
    first = tq_server("tq-a", database=pg_url, heartbeat_interval="2")
    second = tq_server("tq-b", database=pg_url, heartbeat_interval="2")
    both = f"{first.url},{second.url}"
    operator = TqClient(both, OPERATOR, timeout=10)
    data = {
        "name": "failover",
        "tasks": [{"name": f"t{i:02d}", "command": "sleep 0.4"} for i in range(TASKS)],
    }
    assert operator.submit(data).tasks == TASKS
    pilots.start(both, "p1", "--max-idle", "8")
    pilots.start(both, "p2", "--max-idle", "8")
    pilots.start(first.url, "p3", "--tq", second.url, "--max-idle", "8")  # --tq repeated
    wait_until(lambda: _done(operator) >= 4, 60, "the first tasks to finish")

    first.kill(signal.SIGKILL)
    # Eight more after the kill (on a loaded machine many may be done by the time it lands).
    after_first = _watch(operator, min(TASKS, _done(operator) + 8))
    first.start()  # the same port and database: back in the pool
    second.kill(signal.SIGKILL)
    after_second = _watch(operator, TASKS)
    stalls = (_stall(after_first), _stall(after_second))
    print(
        f"after SIGKILL of one instance, then of the other: the next completion in "
        f"{_first(after_first):.2f} s and {_first(after_second):.2f} s; longest pauses "
        f"{stalls[0]:.2f} s and {stalls[1]:.2f} s"
    )
    assert max(stalls) < 15, f"the pilots stalled {max(stalls):.1f} s after an instance died"
    status = first.operator().status()
    tasks = status.workflows[0].tasks
    assert tasks["done"] == TASKS and tasks["failed"] == 0
    assert status.completions == TASKS  # none ran twice to completion
    for process in pilots.processes:
        assert process.wait(timeout=60) == 0
    logs = "".join(pilots.log(name) for name in ("p1", "p2", "p3"))
    assert "failing over" in logs  # the pilots did meet the dead instances


class _Refusing(http.server.BaseHTTPRequestHandler):
    """An instance that answers every call 503 (overloaded) and counts them."""

    calls = 0

    def do_GET(self) -> None:
        type(self).calls += 1
        body = b'{"detail": "overloaded"}'
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        del args


@pytest.fixture
def refusing_server() -> Iterator[tuple[str, type[_Refusing]]]:
    handler = type("Refusing", (_Refusing,), {"calls": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="refusing-tq")
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def _hammer(client: TqClient, seconds: float) -> int:
    calls = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        calls += 1
        with pytest.raises(TaskQueueError, match="503"):
            client.status()
    return calls


def test_a_failing_instance_is_throttled(refusing_server: tuple[str, type[_Refusing]]) -> None:
    """Lee 2003 §4.3: a client that keeps failing against an instance slows down."""
    url, handler = refusing_server
    unthrottled = _hammer(TqClient(url, OPERATOR, throttle=False), 1.5)
    seen_unthrottled, handler.calls = handler.calls, 0
    throttled_client = TqClient(url, OPERATOR)
    throttled = _hammer(throttled_client, 1.5)
    print(f"calls in 1.5 s to a 503 instance: {unthrottled} unthrottled, {throttled} throttled")
    assert seen_unthrottled == unthrottled and handler.calls == throttled
    assert throttled <= 12 < unthrottled
    assert throttled_client.throttles[url].rate < throttled_client.throttles[url].max_rate
