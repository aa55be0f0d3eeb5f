"""One pilot's costly Requirements cannot stall the Task Queue (``tq.service.matching.costly``).

A crafted ``regexp`` runs ~0.15 s per call in classad2, which holds the GIL: before, a pilot whose
Requirements called it was matched on the event loop against each task group in turn, and every
other call, ``/healthz`` included, waited seconds.  Now such pairs are evaluated in a worker
process within a time budget, and an expression may call regexp at most ``MAX_COSTLY_CALLS`` times.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from glidein_ext.testbed.tq_server import OPERATOR, PILOT, TqServer
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.limits import MAX_COSTLY_CALLS
from glidein_ext.tq.client.protocol import Claim, Pair, Registration, SiteAssign, SiteSync
from tests.support.rawhttp import healthz_while, post_json, request

GROUPS = 20
# PCRE backtracks on this until its match limit: ~0.15 s per call, whatever the pilot's site
SLOW = 'regexp("^(([a-z])+.)+[A-Z]([a-z])+$", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!")'


# The same call hidden from a search of the text: the call is found on the tokens
# (``tq.client.limits.costly_calls``); before, these were matched on the event loop.
_PATTERN, _SUBJECT = '"^(([a-z])+.)+[A-Z]([a-z])+$"', '"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!"'
_ESCAPED = f"exp({_PATTERN}, {_SUBJECT})".replace('"', '\\"')
HIDDEN = {
    "comment": f"regexp/**/({_PATTERN}, {_SUBJECT})",
    "eval": f'eval(strcat("reg", "{_ESCAPED}"))',
}


@pytest.mark.parametrize("call", [SLOW, HIDDEN["comment"], HIDDEN["eval"]], ids=["plain", *HIDDEN])
def test_a_pilot_with_costly_requirements_does_not_stall_the_service(
    tq_server: Callable[..., TqServer], call: str
) -> None:
    server = tq_server()
    operator = TqClient(server.url, OPERATOR, throttle=False)
    tasks = [
        {"name": f"t{i}", "command": "true", "requirements": f"TARGET.Memory >= {i}"}
        for i in range(GROUPS)  # one match group each
    ]
    operator.submit({"name": "groups", "tasks": tasks})
    pilots = TqClient(server.url, PILOT, throttle=False)
    slow = " || ".join([call] * 2)  # ~0.3 s per group: ~6 s for the 20 groups on the event loop
    abuser = pilots.register(
        Registration(site="S", host="bad", memory=100, requirements=slow)
    ).pilot_id

    took: list[float] = []

    def abuse() -> None:
        start = time.perf_counter()
        for _ in range(3):
            assert pilots.request(abuser) is None  # its Requirements never match
        took.append(time.perf_counter() - start)

    thread = threading.Thread(target=abuse)
    thread.start()
    health = healthz_while(server.url, thread)
    assert max(health) < 1.0, f"/healthz waited {max(health):.2f} s"  # nobody else waits ...
    assert len(health) >= 20
    assert took and took[0] > 1.0  # ... while the abuse did cost its own requests time
    # the service still serves the others: a plain pilot gets a task at once
    plain = pilots.register(Registration(site="S", host="good", memory=100)).pilot_id
    assert pilots.request(plain) is not None


def test_the_task_view_and_the_stuck_watch_match_costly_pairs_off_the_event_loop(
    tq_server: Callable[..., TqServer],
) -> None:
    """``tq task ID``'s why and the stuck-work watch (every second here) match a throw-away
    Matcher against every live pilot: 20 idle pilots with costly Requirements within the bound,
    and a task likewise (4 crafted regexp calls each, ~0.6 s a pair), are evaluated in the costly
    worker within ``insight.COSTLY_BUDGET``, never where they hold the GIL from ``/healthz``
    (before: 1.5 s waits on the 2-core machine)."""
    server = tq_server(stuck_interval="1")
    operator = TqClient(server.url, OPERATOR, throttle=False)
    slow = " || ".join([SLOW] * MAX_COSTLY_CALLS)
    task = {"name": "t", "command": "true", "requirements": f"{slow} || true"}
    operator.submit({"name": "one", "tasks": [task]})
    pilots = TqClient(server.url, PILOT, throttle=False)
    for n in range(20):
        pilots.register(Registration(site="S", host=f"h{n}", memory=100, requirements=slow))
    answers: list[tuple[int, str]] = []

    def ask() -> None:
        for _ in range(2):
            answers.append(request(server.url, "GET", "/api/v1/tasks/1", OPERATOR, timeout=120))

    thread = threading.Thread(target=ask)
    thread.start()
    health = healthz_while(server.url, thread, at_least=4.0)  # stuck-watch passes too
    assert max(health) < 1.0, f"/healthz waited {max(health):.2f} s"
    assert [code for code, _text in answers] == [200, 200], answers
    assert "no matching pilot" in answers[0][1], answers[0][1]


def test_more_costly_calls_than_the_bound_are_refused(tq_server: Callable[..., TqServer]) -> None:
    server = tq_server()
    requirements = " || ".join([SLOW] * (MAX_COSTLY_CALLS + 1))
    body = {"site": "S", "host": "h", "requirements": requirements}
    code, text = post_json(server.url, "/api/v1/pilots", body, PILOT, timeout=60)
    assert code == 422 and "regexp" in text, text
    task = {"name": "t", "command": "true", "rank": requirements}
    code, text = post_json(server.url, "/api/v1/workflows", {"tasks": [task]}, OPERATOR, timeout=60)
    assert code == 422 and "regexp" in text, text


def test_a_distributed_sites_costly_pilots_do_not_stall_its_masters_calls(
    tq_server: Callable[..., TqServer],
) -> None:
    """A distributed site's master asks for offers (``sync``) and assigns pairs (``assign``) for
    workers whose Requirements call the crafted regexp: before, the store checked each pair of a
    worker and a task group under its lock, on the event loop when the lock was free (~0.6 s a
    pair; 1.5 s of /healthz waiting on the 2-core machine); now those pairs are settled in
    the costly expressions' worker within one request's budget, and the store only reads the
    verdicts."""
    server = tq_server(args=["--architecture", "distributed"])
    operator = TqClient(server.url, OPERATOR, throttle=False)
    tasks = [
        {"name": f"t{i}", "command": "true", "requirements": f"TARGET.Memory >= {i}"}
        for i in range(GROUPS)  # one match group each
    ]
    operator.submit({"name": "groups", "tasks": tasks})
    pilots = TqClient(server.url, PILOT, throttle=False, timeout=120)
    slow = " || ".join([SLOW] * MAX_COSTLY_CALLS)  # ~0.6 s a pair
    site = "D"

    def register(host: str, requirements: str = "true") -> int:
        reg = Registration(
            site=site, host=host, memory=100, requirements=requirements, dht_address=f"{host}:1"
        )
        return pilots.register(reg).pilot_id

    master = register("master")
    workers = [register(f"w{n}", slow) for n in range(3)]
    claimed = pilots.claim_master(site, Claim(master))
    assert claimed.granted and claimed.master is not None, claimed
    epoch = claimed.master.epoch
    took: list[float] = []
    offered: list[int] = []
    refusals: list[str] = []

    def master_calls() -> None:
        start = time.perf_counter()
        for _ in range(3):
            answer = pilots.sync(site, SiteSync(master, epoch, want=GROUPS))
            offered.append(len(answer.tasks))
        took.append(time.perf_counter() - start)
        pairs = tuple(Pair(n + 1, worker) for n, worker in enumerate(workers))
        assigned = pilots.assign(site, SiteAssign(master, epoch, pairs))
        assert not assigned.accepted
        refusals.extend(refused.reason for refused in assigned.refused)

    thread = threading.Thread(target=master_calls)
    thread.start()
    health = healthz_while(server.url, thread)
    assert max(health) < 1.0, f"/healthz waited {max(health):.2f} s"
    assert len(health) >= 20
    assert took and took[0] > 1.0  # the workers' costly pairs were evaluated, elsewhere
    assert len(offered) == 3 and all(n <= GROUPS for n in offered)
    assert len(refusals) == len(workers), refusals
    assert all("costly" in reason for reason in refusals), refusals
