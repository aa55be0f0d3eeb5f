"""Courier push (Lee 2003 4.2.3): an idle pilot's standing offer gets an urgent task at once.

The speed comparison with pulling is ``bench/courier_bench.py``; here: it works, on a real
``tq serve`` (SQLite, one instance) with the client and with a real pilot agent.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from glidein_ext.errors import TaskQueueError
from glidein_ext.testbed.tq_server import TqServer
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.protocol import Registration, TaskAssignment
from tests.support.postgres import pg_server, pg_url

__all__ = ["pg_server", "pg_url"]  # fixtures, used by name


def _courier(server: TqServer) -> dict[str, int]:
    with urllib.request.urlopen(f"{server.url}/healthz", timeout=10) as answer:  # noqa: S310
        return {k: int(v) for k, v in json.load(answer)["courier"].items()}


def _offers(server: TqServer) -> int:
    return _courier(server)["offers"]


@dataclass
class _Standing:
    """A registered pilot's request standing as a 30 s offer, asked in a thread: when and what
    it got, or the error it raised; the pilot's client."""

    asking: threading.Thread
    got: list[tuple[float, TaskAssignment | None]]
    failed: list[TaskQueueError]
    pilot: TqClient
    pilot_id: int


def _stand_offer(server: TqServer) -> _Standing:
    pilot = server.pilot()
    pilot_id = pilot.register(Registration(site="T0", host="wn1")).pilot_id
    got: list[tuple[float, TaskAssignment | None]] = []
    failed: list[TaskQueueError] = []

    def ask() -> None:
        try:
            task = pilot.request(pilot_id, wait=30)
        except TaskQueueError as exc:
            failed.append(exc)
        else:
            got.append((time.monotonic(), task))

    asking = threading.Thread(target=ask, name="offer")
    asking.start()
    return _Standing(asking, got, failed, pilot, pilot_id)


def test_an_urgent_task_is_pushed_to_a_standing_offer(
    tq_server: Callable[..., TqServer], wait_until: Callable[..., Any]
) -> None:
    server = tq_server(courier_priority="100")
    standing = _stand_offer(server)
    asking, got = standing.asking, standing.got
    wait_until(lambda: _offers(server) == 1, 20, "the request to stand as an offer")
    operator = server.operator()
    operator.submit({"name": "slow", "tasks": [{"name": "low", "command": "true"}]})
    asking.join(1.0)
    assert asking.is_alive(), "a task below courier_priority must not be pushed"
    submitted = time.monotonic()
    operator.submit(
        {"name": "fast", "tasks": [{"name": "urgent", "command": "true", "priority": 500}]}
    )
    asking.join(10)
    assert not asking.is_alive() and got, "the urgent task was not pushed to the offer"
    answered, task = got[0]
    assert task is not None and task.name == "urgent"  # the higher priority is taken first
    print(f"urgent task at the offer {1000 * (answered - submitted):.0f} ms after its submit")
    assert _offers(server) == 0


def test_a_pilot_agent_offering_runs_an_urgent_task_long_before_its_next_pull(
    tq_server: Callable[..., TqServer],
    pilots: Any,
    wait_until: Callable[..., Any],
) -> None:
    server = tq_server(courier_priority="100")
    # Its offers stand 8 s each; without them it would pull every 60 s and the task would wait
    # for that pull.
    pilots.start(server.url, "p1", "--offer-wait", "8", "--poll", "60", "--poll-max", "60")
    wait_until(lambda: _offers(server) == 1, 60, "the pilot to leave a standing offer")
    operator = server.operator()
    submitted = time.monotonic()
    operator.submit(
        {"name": "fast", "tasks": [{"name": "urgent", "command": "true", "priority": 100}]}
    )
    wait_until(
        lambda: operator.status().workflows[0].tasks["done"] == 1, 20, "the urgent task to run"
    )
    took = time.monotonic() - submitted
    print(f"urgent task done {took:.2f} s after its submit")
    assert took < 8  # sooner than the offer's own end: it was pushed
    assert _courier(server)["pushed"] == 1


def test_a_standing_offer_is_cut_short_by_its_client_and_the_client_goes_on(
    tq_server: Callable[..., TqServer], wait_until: Callable[..., Any]
) -> None:
    """``abort_waiting`` (a stopping pilot's) ends the offer at once, not after its 30 s, and
    fails over nowhere; the same client's next call is served."""
    server = tq_server(courier_priority="100")
    standing = _stand_offer(server)
    wait_until(lambda: _offers(server) == 1, 20, "the request to stand as an offer")
    assert standing.pilot.abort_waiting() == 1
    standing.asking.join(10)
    assert not standing.asking.is_alive(), "the offer stood on after abort_waiting"
    assert len(standing.failed) == 1 and standing.got == []
    assert standing.pilot.heartbeat(standing.pilot_id).others == ()  # the client goes on
    assert standing.pilot.abort_waiting() == 0  # nothing stands any more


def test_a_stopping_pilot_does_not_stand_out_its_offer(
    tq_server: Callable[..., TqServer], pilots: Any, wait_until: Callable[..., Any]
) -> None:
    """SIGTERM to a pilot whose request stands 120 s: it leaves (deregistered) in seconds."""
    server = tq_server()  # its offers stand, whatever courier_priority
    process = pilots.start(server.url, "p1", "--offer-wait", "120")
    wait_until(lambda: _offers(server) == 1, 60, "the pilot to leave a standing offer")
    stopped = time.monotonic()
    process.terminate()
    assert process.wait(timeout=60) == 0, pilots.log("p1")
    took = time.monotonic() - stopped
    print(f"pilot gone {took:.2f} s after SIGTERM")
    assert took < 30, pilots.log("p1")  # not the offer's 120 s
    assert "deregister failed" not in pilots.log("p1")
    states = server.operator().status().pilots.get("T0", {})
    assert not states.get("idle") and not states.get("busy"), states  # it deregistered


def test_an_urgent_task_submitted_through_another_instance_is_pushed(
    pg_url: str, tq_server: Callable[..., TqServer], wait_until: Callable[..., Any]
) -> None:
    """A pool (Lee 2003 4.2): the offer stands at one instance, the task comes through another;
    the pool's notification carries it over (``tq.service.pool.courier_pool``)."""
    first = tq_server("tq-a", database=pg_url, courier_priority="100")
    second = tq_server("tq-b", database=pg_url, courier_priority="100")
    standing = _stand_offer(second)
    asking, got = standing.asking, standing.got
    wait_until(lambda: _offers(second) == 1, 20, "the request to stand as an offer")
    submitted = time.monotonic()
    first.operator().submit(
        {"name": "fast", "tasks": [{"name": "urgent", "command": "true", "priority": 500}]}
    )
    asking.join(20)
    assert not asking.is_alive() and got, "the urgent task was not pushed across instances"
    answered, task = got[0]
    assert task is not None and task.name == "urgent"
    print(f"across instances: urgent task at the offer {answered - submitted:.3f} s after submit")
    assert answered - submitted < 15  # far less than the offer's 30 s: pushed, not timed out
