"""Several schedds per site (tq.manager.schedds): the pure balancer with a fake clock, the submitter
over fake PilotManagers, and the sites file's ``schedds``."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from glidein_ext.errors import CondorError, SitesFileError
from glidein_ext.tq.manager.pilot_submit import PilotJob
from glidein_ext.tq.manager.schedds import MultiScheddSubmitter, ScheddBalancer, ScheddLimit
from glidein_ext.tq.manager.sites import parse_sites

A, B, C = ScheddLimit("a", 10), ScheddLimit("b", 10), ScheddLimit("c", 4)


def balancer(*schedds: ScheddLimit, **kwargs: Any) -> ScheddBalancer:
    return ScheddBalancer(schedds, rng=random.Random(1), **kwargs)


def test_pilots_go_to_the_least_loaded_schedd_relative_to_its_limit() -> None:
    policy = balancer(A, B, C)
    # in proportion to their limits (10, 10, 4); ties go to the first name
    assert policy.split(6, {"a": 0, "b": 0, "c": 0}, 0.0) == {"a": 3, "b": 2, "c": 1}
    assert policy.split(6, {"a": 6, "b": 2, "c": 0}, 0.0) == {"b": 4, "c": 2}
    # never above a schedd's own maxPilots
    assert policy.split(30, {"a": 0, "b": 9, "c": 4}, 0.0) == {"a": 10, "b": 1}


def test_a_failed_schedd_is_backed_off_then_tried_again() -> None:
    policy = balancer(A, B, backoff_base=30.0, backoff_cap=600.0)
    first = policy.failed("a", now=100.0)
    assert 15.0 <= first <= 30.0
    assert policy.split(4, {"a": 0, "b": 0}, 100.0 + first - 1) == {"b": 4}
    assert [s.name for s in policy.available(100.0 + first)] == ["a", "b"]
    second = policy.failed("a", now=200.0)  # failing again: backed off longer
    assert second > first * 0.99 and 30.0 <= second <= 60.0


def test_a_schedd_that_failed_gets_pilots_back_gradually() -> None:
    policy = balancer(A, B, rate=1.0)  # healthy: 1 pilot/s, 10 at once
    loads = {"a": 0, "b": 0}
    assert policy.split(20, loads, 0.0) == {"a": 10, "b": 10}
    for _ in range(3):
        policy.failed("a", 0.0)
    later = 10_000.0  # its backoff long over, its bucket refilled at the cut rate
    assert policy.split(20, loads, later)["a"] == 10
    policy.failed("a", later)  # fails again: empty bucket, a slower rate
    soon = later + 3.0  # backoff over (rng), but only a few pilots' worth of allowance
    policy.backoff.succeeded("a")
    given = policy.split(20, loads, soon)
    assert given.get("a", 0) < 3 and given["b"] == 10
    policy.submitted("a", given.get("a", 0), soon)
    assert policy.throttles["a"].rate > policy.throttles["a"].min_rate  # recovering


class FakeManager:
    def __init__(self, name: str, fail: bool = False) -> None:
        self.name = name
        self.fail = fail
        self.next = 1
        self.jobs: list[str] = []
        self.removed: list[str] = []

    def locate(self) -> None:
        if self.fail:
            raise CondorError(f"cannot locate {self.name}")

    def load(self, site: str) -> int:
        self.locate()
        return len(self.jobs)

    def submit(self, site: str, count: int, job: PilotJob) -> list[str]:
        self.locate()
        assert job.batch_prefix == f"{self.name}/"
        ids = [f"{self.next}.{p}" for p in range(count)]
        self.next += 1
        self.jobs += ids
        return [job.batch_prefix + i for i in ids]

    def alive(self, batch_ids: Sequence[str]) -> set[str]:
        self.locate()
        return set(batch_ids) & set(self.jobs)

    def remove(self, batch_ids: Sequence[str]) -> None:
        self.removed += batch_ids


JOB = PilotJob(tq_url="http://tq", workdir_base="/scratch")


def submitter(*managers: FakeManager, clock: list[float]) -> MultiScheddSubmitter:
    limits = [ScheddLimit(m.name, 10) for m in managers]
    return MultiScheddSubmitter(
        ScheddBalancer(limits, rng=random.Random(2)),
        {m.name: m for m in managers},  # type: ignore[misc]
        clock=lambda: clock[0],
    )


def test_the_submitter_spreads_and_routes_batch_ids_to_their_schedd() -> None:
    a, b = FakeManager("a"), FakeManager("b")
    multi = submitter(a, b, clock=[0.0])
    ids = multi.submit("T2", 6, JOB)
    assert sorted(ids) == sorted([f"a/1.{p}" for p in range(3)] + [f"b/1.{p}" for p in range(3)])
    a.jobs.remove("1.0")  # left the queue
    assert multi.alive(ids) == set(ids) - {"a/1.0"}
    multi.remove(["a/1.1", "b/1.2"])
    assert a.removed == ["1.1"] and b.removed == ["1.2"]


def test_a_failing_schedd_passes_its_share_and_is_backed_off() -> None:
    a, bad = FakeManager("a"), FakeManager("bad", fail=True)
    clock = [0.0]
    multi = submitter(a, bad, clock=clock)
    assert len(multi.submit("T2", 4, JOB)) == 4 and len(a.jobs) == 4
    assert not multi.balancer.backoff.ready("bad", clock[0])
    bad.fail = False
    clock[0] = 1.0  # still backed off: not even asked
    assert len(multi.submit("T2", 2, JOB)) == 2 and bad.jobs == []
    # its pilots cannot be asked about now: kept, not taken for gone
    assert multi.alive(["bad/7.0"]) == {"bad/7.0"}
    clock[0] = 10_000.0
    multi.submit("T2", 4, JOB)
    assert bad.jobs  # back in the rotation once its backoff ended


def test_all_schedds_failing_is_a_condor_error() -> None:
    multi = submitter(FakeManager("x", fail=True), FakeManager("y", fail=True), clock=[0.0])
    with pytest.raises(CondorError):
        multi.locate()
    assert multi.submit("T2", 3, JOB) == []  # no schedd answered the load query: none tried


def test_the_sites_file_takes_several_schedds() -> None:
    data = {
        "sites": {
            "T2": {
                "maxPilots": 12,
                "schedds": [{"name": "s1", "maxPilots": 8}, {"name": "s2", "pool": "cm:9618"}],
                "pilot": {"workdir": "/scratch"},
            }
        }
    }
    (site,) = parse_sites(data)
    assert site.schedds == (ScheddLimit("s1", 8), ScheddLimit("s2", 12, "cm:9618"))
    assert isinstance(site.submitter(None, {}), MultiScheddSubmitter)
    bad = {**data["sites"]["T2"], "schedd": "s0"}
    with pytest.raises(SitesFileError, match="either schedd or schedds"):
        parse_sites({"sites": {"T2": bad}})
    dup = {**data["sites"]["T2"], "schedds": [{"name": "s1"}, {"name": "s1"}]}
    with pytest.raises(SitesFileError, match="unique"):
        parse_sites({"sites": {"T2": dup}})
