"""A pool of TQ instances on one PostgreSQL database is one live queue (Lee 2003).

In-process: two stores (two instances' state) on one database, the second with its listener
(``tq.service.pool.notify``) running in a thread: what the first commits reaches the second's
matcher by notification, waitForData sees the other instance's pilots, a resync repairs a missed
change. Then three real ``tq serve`` processes: a task submitted through one is taken through
another within a second, and the PilotMonitor's role (an advisory lock) moves when its holder is
killed.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from glidein_ext.errors import StaleMasterError
from glidein_ext.sandbox.pool import wait_for
from glidein_ext.testbed.tq_server import TqServer
from glidein_ext.tq.client.protocol import (
    Claim,
    ClaimAnswer,
    Completion,
    Pair,
    Registration,
    SiteAssign,
    SiteSync,
)
from glidein_ext.tq.models import Architecture
from glidein_ext.tq.service.db import make_engine, migrate
from glidein_ext.tq.service.pool.notify import PoolListener, libpq_url, named_url
from glidein_ext.tq.service.store import Store
from glidein_ext.tq.workflow import parse_workflow
from tests.support.postgres import pg_server, pg_url

# CPU-heavy: runs in one xdist worker with the other heavy tests (tests/conftest.py).
pytestmark = pytest.mark.heavy

__all__ = ["pg_server", "pg_url"]  # fixtures, used by name

NOTIFIED = 5.0  # seconds a notified change may take to show in-process (it takes milliseconds)


def _store(url: str, name: str, **options: Any) -> Store:
    engine = make_engine(named_url(url, name))
    migrate(engine)
    store = Store(engine, **options)
    store.load()
    return store


class Instance:
    """One instance's store and, if listening, its listener looping in a thread."""

    def __init__(self, url: str, name: str, listen: bool = True, **options: Any) -> None:
        self.name = name
        self.store = _store(url, name, **options)
        self.listener = PoolListener(self.store, libpq_url(self.store.engine.url), name)
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        if listen:
            self.listener.listen()  # connected (and resynced) before the test goes on
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.listener.listen()
            except BaseException as exc:  # the test fails on it below
                self.errors.append(exc)
                return

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        self.listener.close()
        self.store.engine.dispose()
        assert self.errors == []


@pytest.fixture
def instances(pg_url: str) -> Iterator[Callable[..., Instance]]:
    made: list[Instance] = []

    def make(name: str, listen: bool = True, **options: Any) -> Instance:
        made.append(Instance(pg_url, name, listen, **options))
        return made[-1]

    yield make
    for instance in made:
        instance.close()


def _eventually(probe: Callable[[], bool], what: str, timeout: float = NOTIFIED) -> float:
    """Seconds until ``probe()`` holds; AssertionError after ``timeout``."""
    start = time.monotonic()
    while not probe():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.005)
    return time.monotonic() - start


def _workflow(name: str, count: int, **task: Any) -> Any:
    return parse_workflow(
        {
            "name": name,
            "tasks": [{"name": f"{name}{i}", "command": "true", **task} for i in range(count)],
        }
    )


def test_what_one_instance_commits_reaches_the_others_matcher(
    instances: Callable[..., Instance],
) -> None:
    a, b = instances("tq-a", listen=False), instances("tq-b")
    a.store.submit(_workflow("w", 20))
    _eventually(lambda: len(b.store.matcher) == 20, "B holds the 20 tasks A queued")
    pilot = a.store.register(Registration(site="S", host="h1")).pilot_id
    _eventually(lambda: b.store.matcher.pilot(pilot) is not None, "B knows A's pilot")
    taken = a.store.request(pilot)
    assert taken is not None
    _eventually(lambda: taken.task_id not in b.store.matcher, "B drops the task A handed out")
    busy = b.store.matcher.pilot(pilot)
    _eventually(lambda: busy is not None and not busy.idle, "B sees A's pilot busy")
    a.store.complete(pilot, Completion(taken.task_id, taken.attempt, 0))
    _eventually(lambda: busy is not None and busy.idle, "B sees A's pilot idle again")
    a.store.deregister(pilot)
    _eventually(lambda: b.store.matcher.pilot(pilot) is None, "B forgets the pilot that left")
    assert len(b.store.matcher) == 19 and b.listener.notifications > 0


def test_own_changes_are_not_read_back(instances: Callable[..., Instance]) -> None:
    a = instances("tq-a")
    reread: list[int] = []
    original = a.store._reread

    def spy(tasks: Sequence[int], pilots: Sequence[int]) -> None:
        reread.extend(tasks)
        original(tasks, pilots)

    a.store._reread = spy  # type: ignore[method-assign]
    mine = a.store.submit(_workflow("w", 5))
    b = instances("tq-b", listen=False)
    theirs = b.store.submit(_workflow("v", 3))
    _eventually(lambda: len(a.store.matcher) == 8, "A holds B's tasks too")
    by_workflow = {r.id: r.workflow_id for r in a.store.task_rows()}
    # A heard its own five tasks too, but read only B's three
    assert sorted(by_workflow[i] for i in reread) == [theirs] * 3 and mine != theirs
    assert a.listener.notifications >= 8


def test_wait_for_data_holds_a_task_for_another_instances_idle_pilot(
    instances: Callable[..., Instance],
) -> None:
    """Hasham 2011 §IV-E across the pool: the pilot caching the input registered through A; B keeps
    the task from a pilot without it while the holder is idle."""
    a = instances("tq-a", wait_for_data=60.0)
    b = instances("tq-b", wait_for_data=60.0)
    holder = a.store.register(Registration(site="S", host="h1")).pilot_id
    other = b.store.register(Registration(site="S", host="h2")).pilot_id
    a.store.submit(
        parse_workflow(
            {"name": "p", "tasks": [{"name": "p0", "command": "true", "outputs": ["/f/a"]}]}
        )
    )
    first = a.store.request(holder)
    assert first is not None
    a.store.complete(holder, Completion(first.task_id, first.attempt, 0, outputs=("/f/a",)))
    _eventually(
        lambda: (p := b.store.matcher.pilot(holder)) is not None and "/f/a" in p.cached and p.idle,
        "B knows A's pilot caches /f/a and is idle",
    )
    a.store.submit(
        parse_workflow(
            {
                "name": "c",
                "available": ["/f/a"],
                "tasks": [{"name": "c0", "command": "true", "inputs": ["/f/a"]}],
            }
        )
    )
    task_id = max(r.id for r in a.store.task_rows())
    _eventually(lambda: task_id in b.store.matcher, "B holds the new task")
    assert b.store.request(other) is None  # held for the idle holder (waitForData)
    got = a.store.request(holder)
    assert got is not None and got.task_id == task_id and got.cached_inputs == 1


def test_a_distributed_masters_calls_hold_across_instances(
    instances: Callable[..., Instance],
) -> None:
    """Delgado Peris 2014 §III.B on a pool: the role and its epoch live in the database, so a master
    may
    call any instance, and a stale master is refused by every one."""
    options = {"default_architecture": Architecture.DISTRIBUTED, "master_timeout": 1.0}
    a, b = instances("tq-a", **options), instances("tq-b", **options)
    first = a.store.register(Registration(site="S", host="h1", dht_address="10.0.0.1:1"))
    second = b.store.register(Registration(site="S", host="h2", dht_address="10.0.0.2:1"))
    master = first.master
    assert master is not None and master.epoch == 1
    assert second.master is not None and second.master.pilot_id == master.pilot_id
    a.store.submit(_workflow("w", 4))
    offers = b.store.sync("S", SiteSync(master.pilot_id, master.epoch, want=4)).tasks
    assert len(offers) == 4
    pair = Pair(offers[0].task_id, second.pilot_id)
    placed = b.store.assign("S", SiteAssign(master.pilot_id, master.epoch, (pair,))).accepted
    assert [p.task_id for p in placed] == [offers[0].task_id]
    _eventually(lambda: offers[0].task_id not in a.store.matcher, "A drops what B assigned")
    # refused while the master lives; granted once it is silent for the master timeout (1 s)
    claims: list[ClaimAnswer] = []

    def claim() -> bool:
        claims.append(b.store.claim_master("S", Claim(second.pilot_id)))
        return claims[-1].granted

    _eventually(claim, "the claim through B once the master is silent")
    granted = claims[-1]
    assert not claims[0].granted and granted.master is not None and granted.master.epoch == 2
    with pytest.raises(StaleMasterError):  # the old master, through the other instance
        a.store.sync("S", SiteSync(master.pilot_id, master.epoch))
    new = granted.master
    assert a.store.sync("S", SiteSync(new.pilot_id, new.epoch)).queued == 3  # one is running
    assert a.store.status().pilots["S"] == {"busy": 1, "lost": 1}  # the old master is lost


def test_resync_repairs_a_change_whose_notification_was_missed(
    instances: Callable[..., Instance],
) -> None:
    a, b = instances("tq-a", listen=False), instances("tq-b", listen=False)
    a.store.submit(_workflow("w", 7))
    pilot = a.store.register(Registration(site="S", host="h1")).pilot_id
    assert len(b.store.matcher) == 0 and b.store.matcher.pilot(pilot) is None
    done = b.listener.resync()
    assert (done.tasks_added, done.pilots_added) == (7, 1)
    assert len(b.store.matcher) == 7 and b.store.matcher.pilot(pilot) is not None
    a.store.deregister(pilot)
    with a.store.engine.begin() as conn:  # an operator fails a task by hand
        conn.execute(
            sa.text("UPDATE tasks SET state = 'failed' WHERE id = (SELECT min(id) FROM tasks)")
        )
    done = b.listener.resync()
    assert (done.tasks_dropped, done.pilots_dropped) == (1, 1)
    assert len(b.store.matcher) == 6


def test_listener_reconnects_and_resyncs_after_its_connection_is_killed(
    instances: Callable[..., Instance], pg_url: str
) -> None:
    b = instances("tq-b", listen=False)
    a = instances("tq-a", listen=False)
    b.listener.listen()
    engine = make_engine(pg_url)
    with engine.begin() as conn:  # the listener's session dies (a database restart, a proxy)
        killed = conn.execute(
            sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'tq-b' AND query LIKE 'LISTEN%'"
            )
        ).all()
    engine.dispose()
    assert killed == [(True,)]
    a.store.submit(_workflow("w", 4))  # notified while B is not listening
    with pytest.raises(Exception, match="notification connection broke"):
        for _ in range(10):
            b.listener.listen()
    b.listener.listen()  # connects again, resyncs
    assert b.listener.connects == 2 and len(b.store.matcher) == 4


# --- three real instances --------------------------------------------------------------------


@pytest.fixture
def pool(pg_url: str, tmp_path: Path) -> Iterator[Callable[..., list[TqServer]]]:
    servers: list[TqServer] = []

    def start(count: int = 3, args: tuple[str, ...] = ()) -> list[TqServer]:
        for i in range(count):
            servers.append(TqServer(tmp_path / f"tq{i}", database=pg_url, args=args).start())
        return servers

    yield start
    for server in servers:
        server.stop()


def test_a_task_submitted_through_one_instance_is_taken_through_another_within_a_second(
    pool: Callable[..., list[TqServer]],
) -> None:
    """The margin: a notification reaches another instance in a few milliseconds (its listener
    gathers for 10 ms, then re-reads the rows); 1 s leaves some 20 times the usual delay for a
    loaded machine.  The first round (connections, ads built) is a warm-up and not asserted."""
    servers = pool(3)
    delays = []
    for round_ in range(6):
        source, taker = servers[round_ % 3], servers[(round_ + 1) % 3]
        pilot_client = taker.pilot(timeout=10)
        pilot = pilot_client.register(Registration(site="T0", host=f"wn{round_}")).pilot_id
        assert pilot_client.request(pilot) is None  # nothing queued yet
        source.operator(timeout=10).submit(
            {"name": f"r{round_}", "tasks": [{"name": f"r{round_}", "command": "true"}]}
        )
        start = time.monotonic()
        while (task := pilot_client.request(pilot)) is None:
            assert time.monotonic() - start < 10, (
                f"the task never reached the other instance; its log:\n{taker.log()}"
            )
            time.sleep(0.01)
        delays.append(time.monotonic() - start)
        pilot_client.complete(pilot, Completion(task.task_id, task.attempt, 0))
        pilot_client.deregister(pilot)
    assert max(delays[1:]) < 1.0, delays


def _sites(server: TqServer) -> dict[str, Any]:
    answer: dict[str, Any] = server.operator(timeout=10).call("GET", "/api/v1/sites")
    return answer


def test_pilot_monitor_role_moves_when_its_holder_is_killed(
    pool: Callable[..., list[TqServer]], tmp_path: Path
) -> None:
    sites = tmp_path / "sites.yaml"
    sites.write_text(
        yaml.safe_dump(
            {
                "defaults": {"pool": "127.0.0.1:9", "pilot": {"workdir": "/tmp/pilots"}},
                "sites": {"T2_POOL": {"minPilots": 0, "maxPilots": 0}},
            }
        )
    )
    servers = pool(3, ("--sites", str(sites), "--monitor-interval", "1"))

    def leaders(alive: list[TqServer]) -> list[TqServer]:
        return [s for s in alive if _sites(s)["leader"]]

    deadline = time.monotonic() + 30
    while len(found := leaders(servers)) != 1:
        assert time.monotonic() < deadline, "no single PilotMonitor in the pool"
        time.sleep(0.2)
    first = found[0]
    passes = _sites(first)["passes"]
    _eventually(lambda: _sites(first)["passes"] > passes, "the leader passes", timeout=15)
    others = [s for s in servers if s is not first]
    assert all(_sites(s)["passes"] == 0 for s in others)  # the others stand by
    first.kill(signal.SIGKILL)
    start = time.monotonic()
    while len(found := leaders(others)) != 1:
        assert time.monotonic() - start < 30, "nobody took the PilotMonitor over"
        time.sleep(0.2)
    assert found[0] is not first
    first.start()  # back: it stands by while the new holder lives
    _eventually(lambda: _loop_passes(first) >= 3, "three passes of the restarted one", 30)
    assert not _sites(first)["leader"] and leaders(servers) == found


def _loop_passes(server: TqServer) -> int:
    """The PilotMonitor loop's passes, leading or standing by (``/healthz``)."""
    health: dict[str, Any] = server.operator(timeout=10).call("GET", "/healthz")
    return int(health["loops"]["PilotMonitor"]["passes"])


def test_a_masters_long_poll_at_one_instance_is_answered_by_a_submission_through_another(
    pool: Callable[..., list[TqServer]], pg_url: str
) -> None:
    """The long poll (``tq.service.site_waits``) is woken by what the pool's notifications bring:
    a workflow submitted through A reaches a master waiting at B within a second or two, not at
    the end of its 30 s wait."""
    a, b = pool(2, ("--architecture", "distributed"))
    master_client = b.pilot(timeout=10)
    answer = master_client.register(Registration(site="S", host="wn1", dht_address="10.0.0.1:1"))
    master = answer.master
    assert master is not None
    assert master_client.sync("S", SiteSync(master.pilot_id, master.epoch)).queued == 0
    got: list[Any] = []

    def poll() -> None:
        call = SiteSync(master.pilot_id, master.epoch, want=4, wait=30.0)
        got.append(master_client.sync("S", call))

    engine = make_engine(pg_url)

    def master_seen() -> float | None:
        query = sa.text("SELECT master_seen FROM site_state WHERE site = 'S'")
        with engine.connect() as conn:
            return conn.execute(query).scalar_one_or_none()

    synced = master_seen()
    waiting = threading.Thread(target=poll)
    waiting.start()
    # B took the poll: its first look counted as the master's call (``master_seen``), and found
    # nothing runnable, so it waits (a submission from now on wakes it).
    wait_for(lambda: master_seen() != synced, 20, "the long poll to reach B", interval=0.05)
    engine.dispose()
    assert waiting.is_alive()  # nothing runnable: it waits at B
    submitted = time.monotonic()
    a.operator(timeout=10).submit({"name": "w", "tasks": [{"name": "t", "command": "true"}]})
    waiting.join(timeout=40)
    took = time.monotonic() - submitted
    assert [offer.name for offer in got[0].tasks] == ["t"]
    assert took < 15.0, took  # answered by the notification, not by the end of the wait
