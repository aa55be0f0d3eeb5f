"""The store's layering: ``Store`` composes plain parts (no mixin chain), and every public method
of ``Store`` runs in exactly one database transaction, counted by SQLAlchemy's ``begin`` event on
the engine.  The site DHT's additions to register, complete, deregister and submit (Delgado Peris
2014 §III) run in the same transaction as the pilot protocol's part: a failure in them leaves
nothing half done."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from glidein_ext.errors import TaskQueueError
from glidein_ext.tq.client.protocol import (
    Claim,
    CompleteAndRequest,
    Completion,
    Pair,
    Registration,
    SiteAssign,
    SiteCompletion,
    SiteSync,
)
from glidein_ext.tq.models import Architecture, PilotInfo
from glidein_ext.tq.service.db import make_engine, migrate
from glidein_ext.tq.service.store import Store
from glidein_ext.tq.service.store.pool import News
from glidein_ext.tq.workflow import generate, parse_workflow
from tests.support.clock import Clock

NO_TRANSACTION = {
    "architecture_of",
    "queued_groups_for",
    "close",
}  # configuration, the matcher, the end


class Counted:
    """Calls a store's methods and records how many transactions each one began."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.begins = 0
        self.seen: dict[str, set[int]] = {}
        sa.event.listen(store.engine, "begin", self._begin)

    def _begin(self, _conn: sa.Connection) -> None:
        self.begins += 1

    def __call__(self, name: str, *args: Any, **kwargs: Any) -> Any:
        before = self.begins
        try:
            return getattr(self.store, name)(*args, **kwargs)
        finally:
            self.seen.setdefault(name, set()).add(self.begins - before)


def _public_methods() -> set[str]:
    return {
        name
        for name, member in inspect.getmembers(Store)
        if not name.startswith("_") and inspect.isfunction(member)
    }


def _store(tmp_path: Path, clock: Clock) -> Store:
    engine = make_engine(str(tmp_path / "tq.sqlite"))
    migrate(engine)
    return Store(
        engine, clock=clock, default_architecture=Architecture.DISTRIBUTED, master_timeout=5
    )


def test_store_composes_parts_and_has_no_mixin_chain() -> None:
    assert Store.__mro__ == (Store, object)


def test_every_public_method_is_one_transaction(tmp_path: Path) -> None:
    clock = Clock()
    store = _store(tmp_path, clock)
    call = Counted(store)
    call("load")
    call("submit", parse_workflow(generate("w1", scale=4 / 80)))
    answers = [
        call("register", Registration(site="S", host=f"wn{i}", dht_address=f"10.0.0.{i}:4000"))
        for i in range(4)
    ]
    master = answers[0].master
    assert master is not None
    call("heartbeat", answers[3].pilot_id, ["x"])
    mine = call("request", answers[3].pilot_id)
    assert mine is not None
    offers = call("sync", "S", SiteSync(master.pilot_id, master.epoch, want=2)).tasks
    pairs = (Pair(offers[0].task_id, answers[1].pilot_id),)
    (placed,) = call("assign", "S", SiteAssign(master.pilot_id, master.epoch, pairs)).accepted
    done = Completion(placed.task_id, placed.attempt, 0, offers[0].outputs)
    reported = (SiteCompletion(placed.pilot_id, done),)
    synced = call("sync", "S", SiteSync(master.pilot_id, master.epoch, reported))
    assert [r.accepted for r in synced.results] == [True]
    again, queued = call("offers", "S", 2)  # a long poll's second look
    assert queued == synced.queued and len(again) == min(2, queued)
    call("seen", "S", master.pilot_id, master.epoch)  # and its end
    call("complete", answers[3].pilot_id, Completion(mine.task_id, mine.attempt, 0, mine.outputs))
    # the same report again, with the request for the next task: a duplicate, then a request
    repeated = Completion(mine.task_id, mine.attempt, 0, mine.outputs)
    both = call("complete_and_request", answers[3].pilot_id, CompleteAndRequest(repeated))
    assert both.result.duplicate
    # several pilots' calls together (here the same one twice): one transaction for all
    twice = [(answers[3].pilot_id, CompleteAndRequest(repeated))] * 2
    assert [a.result.duplicate for a in call("complete_and_request_each", twice)] == [True, True]
    clock.now += 6  # the master is silent past its timeout
    claim = call("claim_master", "S", Claim(answers[1].pilot_id))
    assert claim.granted  # and the old master was lost, in the same transaction
    call("deregister", answers[2].pilot_id)
    clock.now += 1000
    assert sorted(call("reap")) == [answers[1].pilot_id, answers[3].pilot_id]

    call("record_submission", "1.0", "S")
    call("submissions", "S")
    call("mark_vanished", ["1.0"])
    call("site_view", "S")
    call("status")
    call("task_rows")
    (issued,) = call("mint_credentials", "S", 1)
    call("credentials")
    call("credential_by_hash", "0" * 64)
    call("bind_credentials", [(issued.id, "2.0")])
    pilot = call("register", Registration(site="S", host="wn9"), issued.id).pilot_id
    call("pilot_owner", pilot)
    assert call("revoke_credential", issued.id) == [pilot]  # its pilot is lost, in the same one
    call("resync")
    call("absorb", News(tasks={placed.task_id: ("queued", False)}))  # one row to re-read

    call("architecture_of", "S")
    template = PilotInfo(0, "S", "h", "", 1, 1024, 1024, None, {}, "true", "0")
    call("queued_groups_for", template, clock.now)
    call("close")

    missing = _public_methods() - set(call.seen)
    assert not missing, f"add each public Store method to this test: {sorted(missing)}"
    expected = {name: {0 if name in NO_TRANSACTION else 1} for name in call.seen}
    assert call.seen == expected


def test_a_notification_with_nothing_to_read_begins_no_transaction(tmp_path: Path) -> None:
    store = _store(tmp_path, Clock())
    call = Counted(store)
    call("absorb", News())
    assert call.seen == {"absorb": {0}}


def test_a_failing_site_part_rolls_back_the_registration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The site DHT's part of ``register`` fails: the pilot is not stored and the matcher never
    learns of it (it is updated only after the commit)."""
    store = _store(tmp_path, Clock())
    store.load()
    from glidein_ext.tq.service.store import sites

    def broken(*_args: Any) -> Any:
        raise sa.exc.OperationalError("SELECT", {}, Exception("the disk is full"))

    monkeypatch.setattr(sites, "site_row", broken)
    with pytest.raises(TaskQueueError, match="the disk is full"):
        store.register(Registration(site="S", host="wn0", dht_address="10.0.0.1:4000"))
    assert store.status().pilots == {} and len(store.matcher.pilot_ids()) == 0


def test_the_clock_set_on_the_store_is_the_parts_clock(tmp_path: Path) -> None:
    store = _store(tmp_path, Clock())
    store.load()
    later: Callable[[], float] = lambda: 5000.0  # noqa: E731
    store.clock = later
    store.record_submission("1.0", "S")
    with store.engine.connect() as conn:
        (at,) = conn.execute(sa.text("SELECT submitted_at FROM submissions")).scalars()
    assert at == 5000.0
