"""The PilotMonitor of Hasham 2011 §IV-A: the algorithm, and the pass over the sites (pure,
fakes)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest

from glidein_ext.errors import CondorError
from glidein_ext.tq.manager.monitor import (
    SitePolicy,
    SiteView,
    Thresholds,
    decide_site,
    monitor_cycle,
    pilots_to_submit,
    run_cycle,
)
from glidein_ext.tq.manager.pilot_submit import PilotJob
from glidein_ext.tq.models import PilotInfo


def test_no_slots_left_submits_nothing() -> None:
    limits = Thresholds(min_pilots=2, max_pilots=5, min_idle_pilots=3)
    assert pilots_to_submit(limits, SiteView(idle=1, busy=4, queued_groups=[100])) == 0


def test_inactive_pilots_cover_tasks_first() -> None:
    limits = Thresholds(max_pilots=20)
    assert pilots_to_submit(limits, SiteView(inactive=5, queued_groups=[3, 2])) == 0
    assert pilots_to_submit(limits, SiteView(inactive=5, queued_groups=[3, 4])) == 2


def test_tasks_get_pilots_up_to_max() -> None:
    limits = Thresholds(max_pilots=10)
    assert pilots_to_submit(limits, SiteView(busy=4, queued_groups=[3])) == 3
    assert pilots_to_submit(limits, SiteView(busy=4, queued_groups=[30, 5])) == 6


def test_min_idle_and_min_pilots() -> None:
    assert pilots_to_submit(Thresholds(max_pilots=10, min_idle_pilots=2), SiteView(busy=3)) == 2
    assert pilots_to_submit(Thresholds(max_pilots=10, min_idle_pilots=2), SiteView(idle=2)) == 0
    assert pilots_to_submit(Thresholds(min_pilots=4, max_pilots=10), SiteView(busy=1)) == 3
    assert pilots_to_submit(Thresholds(min_pilots=4, max_pilots=4), SiteView()) == 4


def test_bad_thresholds() -> None:
    with pytest.raises(ValueError, match="minPilots"):
        Thresholds(min_pilots=5, max_pilots=2)


# --- the pass over the sites, driven with fakes of the store and the batch system ---


class FakeStore:
    """The Task Queue's bookkeeping in memory (``MonitorStore``)."""

    def __init__(self, states: dict[str, str] | None = None, idle: int = 0, busy: int = 0) -> None:
        self.states = dict(states or {})
        self.idle, self.busy = idle, busy
        self.groups = [3]
        self.templates: list[PilotInfo] = []

    def submissions(self, site: str) -> dict[str, str]:
        return dict(self.states)

    def mark_vanished(self, batch_ids: Iterable[str]) -> None:
        for batch_id in batch_ids:
            if self.states[batch_id] == "inactive":
                self.states[batch_id] = "vanished"

    def site_view(self, site: str) -> SiteView:
        inactive = sum(1 for state in self.states.values() if state == "inactive")
        return SiteView(inactive=inactive, idle=self.idle, busy=self.busy)

    def queued_groups_for(self, template: PilotInfo, now: float) -> list[int]:
        self.templates.append(template)
        return list(self.groups)

    def record_submission(self, batch_id: str, site: str) -> None:
        self.states[batch_id] = "inactive"


class FakeBatch:
    """A batch system (``PilotSubmitter``): ``alive`` batch ids, or down (CondorError)."""

    def __init__(self, alive: set[str] | None = None, down: bool = False) -> None:
        self.queued = set(alive or ())
        self.down = down
        self.located = 0
        self.submitted: list[tuple[str, int]] = []

    def alive(self, batch_ids: Sequence[str]) -> set[str]:
        if self.down:
            raise CondorError("cannot locate the schedd: connection refused")
        return self.queued & set(batch_ids)

    def locate(self) -> None:
        self.located += 1

    def submit(self, site: str, count: int, job: PilotJob) -> list[str]:
        self.submitted.append((site, count))
        ids = [f"9.{i}" for i in range(count)]
        self.queued.update(ids)
        return ids


def _policy(site: str = "T2", **limits: int) -> SitePolicy:
    job = PilotJob("http://tq:1", "/w", ttl=7200)
    return SitePolicy(site, Thresholds(**{"max_pilots": 10, **limits}), job)


def test_pass_submits_what_plan_says_and_records_it() -> None:
    store, batch = FakeStore(idle=1), FakeBatch()
    decision = decide_site(store, batch, _policy(), now=100.0)
    assert batch.submitted == [("T2", 3)] and decision.submitted == ("9.0", "9.1", "9.2")
    assert store.states == {"9.0": "inactive", "9.1": "inactive", "9.2": "inactive"}
    assert (decision.count, decision.idle, decision.queued_groups) == (3, 1, (3,))
    assert decision.error is None and "3 queued task(s)" in decision.reason
    (template,) = store.templates  # the pilots to come: at this site, empty cache, the job's TTL
    assert (template.site, template.cached, template.expires_at) == ("T2", set(), 7300.0)
    assert "submit 3 (9.0, 9.1, 9.2)" in decision.describe()


def test_pass_marks_vanished_pilots_and_replaces_them() -> None:
    store = FakeStore({"1.0": "inactive", "1.1": "inactive", "2.0": "registered"})
    batch = FakeBatch(alive={"1.1"})
    decision = decide_site(store, batch, _policy(), now=0.0)
    assert decision.vanished == ("1.0",) and store.states["1.0"] == "vanished"
    # the one inactive pilot left covers one of the 3 queued tasks: 2 more are sent
    assert decision.inactive == 1 and decision.count == 2
    assert "vanished=1.0" in decision.describe()


def test_dry_run_records_nothing_and_submits_nothing() -> None:
    store = FakeStore({"1.0": "inactive"})
    batch = FakeBatch(alive=set())
    decision = decide_site(store, batch, _policy(), now=0.0, dry_run=True)
    assert batch.located == 1 and batch.submitted == []
    assert store.states == {"1.0": "inactive"}  # not marked vanished
    assert decision.vanished == ("1.0",) and decision.inactive == 0  # but counted as gone
    assert decision.count == 3 and decision.submitted == ()


def test_a_failing_site_becomes_the_decisions_error_and_stops_no_other() -> None:
    store = FakeStore()
    down, up = FakeBatch(down=True), FakeBatch()
    decisions = run_cycle(store, [(_policy("T9"), down), (_policy("T2"), up)], now=0.0)
    assert [d.site for d in decisions] == ["T9", "T2"]
    assert decisions[0].error is not None and "connection refused" in decisions[0].error
    assert "failed: cannot locate the schedd" in decisions[0].describe()
    assert decisions[1].error is None and up.submitted == [("T2", 3)]
    with pytest.raises(CondorError, match="connection refused"):
        monitor_cycle(store, down, [_policy("T9")], now=0.0)
    assert monitor_cycle(FakeStore(), FakeBatch(), [_policy("T2", max_pilots=2)], 0.0) == {"T2": 2}
