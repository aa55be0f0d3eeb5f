"""A 100,000-task submission does not hold the Task Queue's event loop.

The submission is decoded and parsed in a worker process (``tq.service.api.large_submit``), then
validated and stored in a worker thread with the garbage collector paused
(``tq.service.cpu_bound``), in one transaction under the store's lock (all of it or nothing).
Parsed in a thread, it held the GIL for seconds, and ``/healthz`` waited: p99 0.43 s.  A pilot's
call arriving meanwhile once took that lock on the event loop and waited there for the whole
transaction (~5 s on the 2-core machine), and every other call with it; now the loop never waits
for the lock (``tq.service.api.unblocked``): such a call waits in a worker thread.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

from glidein_ext.testbed.tq_server import OPERATOR, PILOT, TqServer
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.protocol import Registration
from glidein_ext.tq.service.api.large_submit import LARGE
from tests.support.rawhttp import healthz_seconds, request

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
    # encoded before the probes start: encoding 8 MB holds this process's GIL, and the probes'
    # clocks would count it
    body = json.dumps({"name": "large", "tasks": tasks}).encode()
    answers: list[int] = []

    def submit() -> None:
        code, text = _post(server.url, body)
        assert code == 200, text[:200]
        answers.append(json.loads(text)["tasks"])

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
    ordered = sorted(health)
    p99 = ordered[int(0.99 * len(ordered))]
    # The target is p99 < 100 ms (bench/tq_submit_bench.py); generous here (2 shared cores,
    # loads of 17 seen): at load 17, p99 0.07 s now, 0.43 s with the workflow parsed in a thread.
    assert p99 < 0.15, f"/healthz p99 {p99:.3f} s over {len(health)} probes"
    assert ordered[-1] < 1.0, f"/healthz waited {ordered[-1]:.2f} s"
    assert len(health) >= 20 and beats
    status = operator.status()
    assert sum(sum(w.tasks.values()) for w in status.workflows) == TASKS


def _post(url: str, raw: bytes) -> tuple[int, str]:
    return request(url, "POST", "/api/v1/workflows", OPERATOR, raw, timeout=300)


def test_a_large_body_parsed_apart_is_refused_as_a_small_one(
    tq_server: Callable[..., TqServer],
) -> None:
    """Bodies past ``large_submit.LARGE`` are parsed in the worker process: what is wrong with
    them is answered as for a small body, and nothing is stored."""
    server = tq_server()
    pad = b" " * LARGE
    for small, large in [
        (b'{"tasks": [', b'{"tasks": [' + pad),  # not JSON
        (b"[1, 2]", b"[1, 2]" + pad),  # not an object
    ]:
        assert _post(server.url, small) == _post(server.url, large)
    good = [{"name": f"t{i}", "command": "true"} for i in range(30_000)]
    bad = {"name": "bad", "command": "true", "inputs": ["relative/lfn"]}
    small_code, small_text = _post(server.url, json.dumps({"tasks": [bad]}).encode())
    large_body = json.dumps({"tasks": [*good, bad]}).encode()
    assert len(large_body) >= LARGE
    assert (small_code, small_text) == _post(server.url, large_body)
    assert small_code == 422 and "'bad'" in small_text, small_text
    operator = TqClient(server.url, OPERATOR, timeout=300, throttle=False)
    assert operator.status().workflows == ()
    assert operator.submit({"name": "fine", "tasks": good}).tasks == len(good)
