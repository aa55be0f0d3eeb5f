"""A distributed site's long poll against a real ``tq serve`` over HTTP on 127.0.0.1: a master
whose site has nothing runnable waits in its ``sync`` and is answered when a workflow is
submitted, when its wait ends, or when a newer call of its site comes
(``tq.service.site_waits``)."""

from __future__ import annotations

import concurrent.futures
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from glidein_ext.errors import TaskQueueError
from glidein_ext.testbed.site_runs import SiteRun
from glidein_ext.testbed.tq_server import TqServer
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.protocol import Registration, SiteSync, SiteSyncAnswer

SITE = "T2_XX_Wait"


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[TqServer, TqClient, SiteSync]]:
    """A distributed Task Queue, a registered master (its heartbeat ``SiteSync``) and nothing
    queued."""
    with TqServer(tmp_path / "tq", args=["--architecture", "distributed"]) as server:
        client = server.pilot(timeout=10)
        answer = client.register(Registration(site=SITE, host="wn1", dht_address="127.0.0.1:9"))
        assert answer.master is not None
        yield server, client, SiteSync(answer.master.pilot_id, answer.master.epoch)


def _timed(client: TqClient, call: SiteSync) -> tuple[SiteSyncAnswer, float]:
    start = time.monotonic()
    answer = client.sync(SITE, call)
    return answer, time.monotonic() - start


def test_a_waiting_sync_is_answered_when_a_workflow_is_submitted(
    site: tuple[TqServer, TqClient, SiteSync],
) -> None:
    server, client, heartbeat = site
    assert client.sync(SITE, heartbeat).queued == 0
    poll = SiteSync(heartbeat.pilot_id, heartbeat.epoch, want=8, wait=30.0)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(_timed, client, poll)
        time.sleep(1.0)
        assert not waiting.done()  # nothing runnable: it waits
        tasks = [{"name": f"t{i}", "command": "true"} for i in range(3)]
        server.operator(timeout=10).submit({"name": "w", "tasks": tasks})
        answer, took = waiting.result(timeout=20)
    assert sorted(offer.name for offer in answer.tasks) == ["t0", "t1", "t2"]
    assert answer.queued == 3
    assert 0.9 < took < 15.0  # answered at the submission, not at the end of its 30 s


def _master_seen(server: TqServer) -> float:
    with sqlite3.connect(server.database) as conn:
        query = "SELECT master_seen FROM site_state WHERE site = ?"
        (seen,) = conn.execute(query, (SITE,)).fetchone()
    return float(seen)


def test_a_waiting_sync_ends_empty_when_its_time_is_up_and_counts_as_a_call(
    site: tuple[TqServer, TqClient, SiteSync],
) -> None:
    """The Task Queue sees the master again when its poll ends (``seen``): a poll of two
    heartbeats leaves the master silent no longer than the poll."""
    server, client, heartbeat = site
    assert client.sync(SITE, heartbeat).seen is False  # a plain sync: seen when it came
    before = _master_seen(server)
    answer, took = _timed(client, SiteSync(heartbeat.pilot_id, heartbeat.epoch, want=4, wait=1.5))
    assert answer.tasks == () and answer.queued == 0
    assert 1.4 < took < 10.0
    assert answer.seen is True and _master_seen(server) >= before + 1.4


def test_a_newer_call_of_the_site_ends_its_waiting_sync(
    site: tuple[TqServer, TqClient, SiteSync],
) -> None:
    """A master that gave up its poll (a completion came) makes its next call: the Task Queue
    ends the old one at once, so a site never holds two."""
    server, client, heartbeat = site
    poll = SiteSync(heartbeat.pilot_id, heartbeat.epoch, want=4, wait=30.0)
    other = server.pilot(timeout=10)  # a second connection, as the master's next call
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(_timed, client, poll)
        time.sleep(1.0)
        start = time.monotonic()
        other.sync(SITE, heartbeat)
        answer, _ = waiting.result(timeout=20)
        ended_after = time.monotonic() - start
    assert answer.tasks == () and ended_after < 5.0
    assert answer.seen is False  # the newer call counts, not the one it ended


def test_a_wait_beyond_the_cap_is_refused(site: tuple[TqServer, TqClient, SiteSync]) -> None:
    _, client, heartbeat = site
    with pytest.raises(TaskQueueError, match=r"422|wait"):
        client.sync(SITE, SiteSync(heartbeat.pilot_id, heartbeat.epoch, wait=3600.0))


def test_an_idle_site_of_real_pilots_waits_in_one_call_and_starts_a_late_workflow_at_once(
    tmp_path: Path,
) -> None:
    """Real ``pilot run`` processes of a distributed site with nothing to run: the master's sync
    waits at the Task Queue (a long poll of the heartbeat's length: 30 s with a 90 s master
    timeout) instead of polling every 1, 2, 4, 8, 10 s (``--round-period 1``), and a workflow
    submitted meanwhile starts within the round trip, not at the next poll; its only task's
    completion is reported at once (nothing else runs at the site to batch it with)."""
    with SiteRun(
        tmp_path / "site",
        "distributed",
        pilots=6,
        processes=2,
        pilot_args=("--round-period", "1", "--round-window", "0.05"),
        tq_args=("--master-timeout", "90"),
    ) as site:
        operator = site.operator

        def syncs() -> float:
            requests = operator.call("GET", "/api/v1/counters")["overall"]["requests"]
            return float(requests.get("sync", 0))

        deadline = time.monotonic() + 60
        while not syncs():
            assert time.monotonic() < deadline, site.logs()
            time.sleep(0.2)
        time.sleep(3.0)  # its first answers were empty: the site is dry, its master waits
        before = syncs()
        time.sleep(20.0)
        idle_syncs = syncs() - before
        submitted = time.monotonic()
        operator.submit({"name": "late", "tasks": [{"name": "late", "command": "true"}]})
        while True:
            (workflow,) = operator.status().workflows
            if workflow.tasks.get("done", 0) == 1:
                break
            assert time.monotonic() - submitted < 60, f"{workflow.tasks}\n{site.logs()}"
            time.sleep(0.1)
        took = time.monotonic() - submitted
    # Polling would make 2 calls or more in those 20 s (every 10 s at most); the long poll that
    # began before them ends after 30 s: at most one.
    assert idle_syncs <= 1, idle_syncs
    assert took < 3.0, took  # started and reported within the round trips, not a 10 s poll


@pytest.mark.parametrize("architecture", ["distributed", "pre-dht"])
def test_a_stopping_task_queue_ends_the_calls_that_wait_at_once(
    tmp_path: Path, architecture: str
) -> None:
    """SIGTERM: uvicorn lets the calls being served finish; a master's long poll (distributed) or
    a pilot's standing offer (pre-DHT, the courier's) would hold the stop for its whole wait."""
    with TqServer(tmp_path / "tq", args=["--architecture", architecture]) as server:
        client = server.pilot(timeout=10)
        answer = client.register(Registration(site=SITE, host="wn1", dht_address="127.0.0.1:9"))
        master = answer.master

        def wait() -> object:
            if master is not None:
                return client.sync(SITE, SiteSync(master.pilot_id, master.epoch, want=4, wait=50))
            return client.request(answer.pilot_id, wait=50.0)

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(wait)
            time.sleep(1.0)
            assert not waiting.done()
            start = time.monotonic()
            server.stop()
            stopped = time.monotonic() - start
            waiting.result(timeout=20)  # answered (nothing), not cut
    assert stopped < 10.0, stopped
