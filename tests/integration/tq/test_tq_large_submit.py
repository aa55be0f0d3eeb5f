"""A 100,000-task submission does not hold the Task Queue's event loop.

The submission is parsed, validated and stored in a worker thread, in one transaction under the
store's lock (all of it or nothing).  Before, a pilot's call arriving meanwhile took that lock on
the event loop and waited there for the whole transaction (~5 s on the 2-core machine), and every
other call, ``/healthz`` included, waited with it; now the loop never waits for the lock
(``tq.service.api.unblocked``): such a call waits in a worker thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from glidein_ext.testbed.tq_server import OPERATOR, PILOT, TqServer
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.protocol import Registration
from tests.support.rawhttp import healthz_seconds

TASKS = 100_000


def _health(url: str) -> float:
    return healthz_seconds(url, timeout=120)


def test_healthz_answers_while_a_large_submission_is_stored_and_pilots_call(
    tq_server: Callable[..., TqServer],
) -> None:
    server = tq_server()
    operator = TqClient(server.url, OPERATOR, timeout=300, throttle=False)
    pilots = TqClient(server.url, PILOT, timeout=300, throttle=False)
    pilot_id = pilots.register(Registration(site="S", host="h", memory=100)).pilot_id
    tasks = [{"name": f"t{i}", "command": "true"} for i in range(TASKS)]
    answers: list[int] = []

    def submit() -> None:
        answers.append(operator.submit({"name": "large", "tasks": tasks}).tasks)

    beats: list[float] = []
    stop = threading.Event()

    def beat() -> None:  # a pilot's calls meanwhile: each one waits for the lock, off the loop
        while not stop.is_set():
            start = time.perf_counter()
            pilots.heartbeat(pilot_id)
            beats.append(time.perf_counter() - start)
            time.sleep(0.05)

    submitter = threading.Thread(target=submit)
    beater = threading.Thread(target=beat)
    submitter.start()
    beater.start()
    health: list[float] = []
    try:
        while submitter.is_alive():
            health.append(_health(server.url))
            time.sleep(0.02)
    finally:
        stop.set()
        submitter.join()
        beater.join()
    assert answers == [TASKS]
    # generous (2 shared cores, load spikes of 15 seen): the stall was 10 s
    assert max(health) < 2.0, f"/healthz waited {max(health):.2f} s"
    assert len(health) >= 20 and beats
    status = operator.status()
    assert sum(sum(w.tasks.values()) for w in status.workflows) == TASKS
