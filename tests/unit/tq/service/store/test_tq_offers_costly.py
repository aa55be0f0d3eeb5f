"""A distributed site's pair check (``tq.service.store.offers.mismatch``) with a matcher that
defers costly expressions: a costly pair is never evaluated there, only its settled verdict
read; a cheap pair, or a matcher that does not defer, is evaluated as before."""

from __future__ import annotations

from pathlib import Path

from glidein_ext.tq.client.protocol import Pair, Registration, SiteAssign, SiteSync
from glidein_ext.tq.models import Architecture, MatchSpec, PilotInfo, QueuedTask
from glidein_ext.tq.service.db import make_engine, migrate
from glidein_ext.tq.service.matching.match_groups import Verdict
from glidein_ext.tq.service.matching.matcher import Matcher
from glidein_ext.tq.service.store import Store
from glidein_ext.tq.service.store.offers import mismatch
from glidein_ext.tq.workflow import parse_workflow
from tests.support.clock import Clock

# matches, and costly: a regexp call (``tq.client.limits.costly_calls``)
COSTLY = 'regexp("^a", "abc")'


def _matcher(spec: MatchSpec, pilot: PilotInfo, defer: bool) -> Matcher:
    matcher = Matcher(defer_costly=defer)
    matcher.add_task(QueuedTask(1, spec))
    matcher.add_pilot(pilot)
    return matcher


def test_a_costly_pair_waits_for_its_verdict_then_has_it() -> None:
    spec = MatchSpec(requirements=COSTLY)
    pilot = PilotInfo(pilot_id=7, memory=100)
    matcher = _matcher(spec, pilot, defer=True)
    why = mismatch(spec, pilot, 0.0, matcher=matcher)
    assert why is not None and "not evaluated yet" in why
    matcher.settle(7, spec.key(), Verdict(False))
    why = mismatch(spec, pilot, 0.0, matcher=matcher)
    assert why is not None and "costly" in why
    matcher.settle(7, spec.key(), Verdict(True))
    assert mismatch(spec, pilot, 0.0, matcher=matcher) is None


def test_a_costly_pilot_makes_the_pair_costly() -> None:
    spec = MatchSpec()
    pilot = PilotInfo(pilot_id=7, memory=100, requirements=COSTLY)
    matcher = _matcher(spec, pilot, defer=True)
    why = mismatch(spec, pilot, 0.0, matcher=matcher)
    assert why is not None and "not evaluated yet" in why


def test_cheap_pairs_and_resources_are_checked_here() -> None:
    pilot = PilotInfo(pilot_id=7, memory=100)
    cheap = MatchSpec(requirements="TARGET.Memory >= 50")
    matcher = _matcher(cheap, pilot, defer=True)
    assert mismatch(cheap, pilot, 0.0, matcher=matcher) is None
    big = MatchSpec(requirements=COSTLY, request_memory=500)
    why = mismatch(big, pilot, 0.0, matcher=matcher)
    assert why is not None and "memory" in why  # resources first, nothing deferred


def test_a_matcher_that_does_not_defer_evaluates_costly_pairs_here() -> None:
    spec = MatchSpec(requirements=COSTLY)
    pilot = PilotInfo(pilot_id=7, memory=100)
    assert mismatch(spec, pilot, 0.0, matcher=_matcher(spec, pilot, defer=False)) is None
    assert mismatch(spec, pilot, 0.0) is None


def test_a_sites_offers_and_assignment_read_the_costly_verdicts(tmp_path: Path) -> None:
    """Through the store (SQLite): a costly task is not offered to a distributed site, nor
    assigned, before its pair has a verdict; once settled matching, it is offered and taken."""
    engine = make_engine(str(tmp_path / "tq.sqlite"))
    migrate(engine)
    store = Store(engine, clock=Clock(), default_architecture=Architecture.DISTRIBUTED)
    store.load()
    store.matcher.defer_costly = True  # as the service's CostlyEvaluator sets it
    answer = store.register(Registration(site="S", host="wn0", dht_address="10.0.0.1:4000"))
    master = answer.master
    assert master is not None
    task = {"name": "t", "command": "true", "requirements": COSTLY}
    store.submit(parse_workflow({"name": "w", "tasks": [task]}))
    sync = SiteSync(master.pilot_id, master.epoch, want=5)
    assert store.sync("S", sync).tasks == ()  # no verdict yet: not offered
    pair = Pair(1, answer.pilot_id)
    refused = store.assign("S", SiteAssign(master.pilot_id, master.epoch, (pair,))).refused
    assert len(refused) == 1 and "not evaluated yet" in refused[0].reason
    spec = MatchSpec(requirements=COSTLY)
    store.matcher.settle(answer.pilot_id, spec.key(), Verdict(True))
    assert [offer.task_id for offer in store.sync("S", sync).tasks] == [1]
    placed = store.assign("S", SiteAssign(master.pilot_id, master.epoch, (pair,))).accepted
    assert [(item.task_id, item.pilot_id) for item in placed] == [(1, answer.pilot_id)]
    engine.dispose()
