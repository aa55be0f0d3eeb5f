"""The run's counters (Delgado Peris 2014 §IV), driven synchronously."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from glidein_ext.tq.service import counters as counters_module
from glidein_ext.tq.service.counters import (
    MAX_PHASES,
    RunCounters,
    call_kind,
    idle_gaps,
    percentile,
    request_kind,
)


@pytest.mark.parametrize(
    ("method", "path", "kind", "pilot_kind"),
    [
        ("POST", "/api/v1/pilots", "register", "register"),
        ("POST", "/api/v1/pilots/12/request", "request", "request"),
        ("POST", "/api/v1/pilots/12/heartbeat", "heartbeat", "heartbeat"),
        ("POST", "/api/v1/pilots/12/complete", "complete", "complete"),
        ("DELETE", "/api/v1/pilots/12", "deregister", "deregister"),
        ("POST", "/api/v1/pilots/reports", "reports", "reports"),
        ("GET", "/api/v1/pilots/reports", "other", None),
        ("POST", "/api/v1/sites/T2_CH_CERN/master", "claim", "claim"),
        ("POST", "/api/v1/sites/T1/sync", "sync", "sync"),
        ("POST", "/api/v1/sites/T1/assign", "assign", "assign"),
        ("GET", "/api/v1/status", "status", None),
        ("POST", "/api/v1/workflows", "submit", None),
        ("GET", "/api/v1/counters", "counters", None),
        ("GET", "/api/v1/pilots/12", "other", None),
        ("POST", "/api/v1/pilots/12/request/x", "other", None),
        ("GET", "/api/v1/tasks/3", "tasks", None),
        ("GET", "/metrics", "metrics", None),
        ("GET", "/healthz", "healthz", None),
        ("GET", "/api/v1/pilots/12/x/y", "other", None),
        ("GET", "/nowhere", "other", None),
    ],
)
def test_every_call_has_a_kind_and_pilot_requests_are_told_from_operators_calls(
    method: str, path: str, kind: str, pilot_kind: str | None
) -> None:
    """The metrics' kind of every call (no regular expression on the path: a few string
    operations), and the run's counters' kind of a pilot's request."""
    assert call_kind(method, path) == kind
    assert request_kind(method, path) == pilot_kind


# What a pilot's request was, as a regular expression each (the definition the kinds are held to).
PILOT_PATTERNS = (
    ("POST", re.compile(r"^/api/v1/pilots/?$"), "register"),
    ("POST", re.compile(r"^/api/v1/pilots/[^/]+/request$"), "request"),
    ("POST", re.compile(r"^/api/v1/pilots/[^/]+/heartbeat$"), "heartbeat"),
    ("POST", re.compile(r"^/api/v1/pilots/[^/]+/complete$"), "complete"),
    ("DELETE", re.compile(r"^/api/v1/pilots/[^/]+$"), "deregister"),
    ("POST", re.compile(r"^/api/v1/pilots/reports$"), "reports"),
    ("POST", re.compile(r"^/api/v1/sites/[^/]+/master$"), "claim"),
    ("POST", re.compile(r"^/api/v1/sites/[^/]+/sync$"), "sync"),
    ("POST", re.compile(r"^/api/v1/sites/[^/]+/assign$"), "assign"),
)
SEGMENTS = st.sampled_from(
    (
        "api",
        "v1",
        "pilots",
        "sites",
        "12",
        "T1",
        "request",
        "heartbeat",
        "complete",
        "reports",
        "master",
        "sync",
        "assign",
        "workflows",
        "status",
        "metrics",
        "healthz",
        "",
        "x y",
    )
)


@given(
    st.sampled_from(["POST", "DELETE", "GET", "PUT"]),
    st.lists(SEGMENTS, max_size=3),
    st.sampled_from(["/api/v1/", "/api/v1", "/", "/api/v2/"]),
)
def test_a_pilot_request_is_what_its_pattern_says(
    method: str, segments: list[str], prefix: str
) -> None:
    path = prefix + "/".join(segments)
    expected = next((k for m, p, k in PILOT_PATTERNS if m == method and p.match(path)), None)
    assert request_kind(method, path) == expected


def test_percentiles_and_gaps() -> None:
    values = sorted(float(v) for v in range(1, 101))
    assert percentile(values, 0.5) == 50.0 and percentile(values, 0.99) == 99.0
    assert percentile([], 0.5) is None
    # Out of order, as a master reports in bulk; an overlap (several slots) counts 0.
    assert idle_gaps([(10.0, 12.0), (0.0, 5.0), (5.5, 9.0), (11.0, 13.0)]) == [0.5, 1.0, 0.0]


def test_a_workflows_window_counts_its_requests_delays_hits_and_rounds() -> None:
    counters = RunCounters(now=0.0)
    counters.on_request("register")  # before the workflow: overall only
    counters.on_submit(1, "w1", tasks=2, now=10.0)
    for kind in ("request", "request", "complete", "heartbeat", "sync"):
        counters.on_request(kind)
    counters.on_round(rank_sum=16.5, served=2, compared=(15.0, 2))
    counters.on_completion(1, 7, 10.0, 12.0, {"cache": 1, "se": 1, "bogus": 5})
    counters.on_completion(1, 7, 12.5, 14.0, {"peer": 2})
    counters.on_finish(1, now=14.2)
    counters.on_request("deregister")  # after it: overall only
    snap = counters.snapshot(now=20.0)
    (wf,) = snap["workflows"]
    assert wf["requests"] == {"complete": 1, "heartbeat": 1, "request": 2, "sync": 1}
    assert wf["requests_per_task"] == 2.5
    assert wf["inter_task_delay"]["n"] == 1
    assert wf["inter_task_delay"]["median"] == pytest.approx(0.5)
    assert wf["inputs"] == {"cache": 1, "host": 0, "peer": 2, "se": 1}
    assert wf["cache_hit_ratio"] == 0.75 and wf["local_hit_ratio"] == 0.25
    assert wf["turnaround"] == pytest.approx(4.2)
    # the tasks took 2.0 and 1.5 s at the pilot
    assert wf["task_time"] == {"n": 2, "mean": pytest.approx(1.75), "sd": pytest.approx(0.25)}
    assert wf["rounds"] == {
        "n": 1,
        "rank_sum": 16.5,
        "served": 2,
        "compared_sum": 15.0,
        "compared_served": 2,
        "refused": {},
    }
    overall = snap["overall"]
    assert overall["requests_total"] == 7 and overall["tasks_done"] == 2
    assert overall["requests_per_task"] == 3.5


def test_refused_pairs_are_counted_by_reason_overall_and_per_open_workflow() -> None:
    counters = RunCounters()
    counters.on_submit(1, "w", 2, 0.0)
    counters.on_refused("match")
    counters.on_refused("match")
    counters.on_refused("task")
    snap = counters.snapshot(1.0)
    assert snap["overall"]["rounds"]["refused"] == {"match": 2, "task": 1}
    assert snap["workflows"][0]["rounds"]["refused"] == {"match": 2, "task": 1}


def test_masters_are_listed() -> None:
    counters = RunCounters()
    counters.on_master("T2", 3, 1, now=5.0)
    counters.on_master("T2", 5, 2, now=9.0)
    assert [m["pilot_id"] for m in counters.snapshot(10.0)["masters"]["T2"]] == [3, 5]


def test_overlapping_workflows_share_requests_instead_of_counting_them_twice() -> None:
    counters = RunCounters(now=0.0)
    counters.on_submit(1, "w1", tasks=2, now=1.0)
    counters.on_request("complete")  # w1 alone: all of it
    counters.on_submit(2, "w2", tasks=2, now=2.0)
    for _ in range(4):
        counters.on_request("complete")  # both running: half each
    counters.on_finish(1, now=3.0)
    counters.on_request("complete")  # w2 alone
    snap = counters.snapshot(now=4.0)
    by_id = {wf["id"]: wf for wf in snap["workflows"]}
    assert by_id[1]["requests"] == {"complete": 3}
    assert by_id[2]["requests"] == {"complete": 3}
    total = sum(wf["requests_total"] for wf in snap["workflows"])
    assert total == snap["overall"]["requests_total"] == 6


def test_round_phases_are_summed_per_site_and_their_names_bounded() -> None:
    counters = RunCounters()
    counters.on_phases("T2", [("sync", 0.5), ("solve", 0.25)])
    counters.on_phases("T2", [("sync", 1.0)])
    counters.on_phases("T3", [(f"p{i}", 1.0) for i in range(40)])
    phases = counters.snapshot(1.0)["phases"]
    assert phases["T2"] == {"sync": 1.5, "solve": 0.25}
    assert len(phases["T3"]) == MAX_PHASES


def test_tasks_are_counted_by_how_they_ended_not_by_attempts() -> None:
    """Two tasks failing twice each, retried once: no task done, two failed, four attempts; the
    overall tasks are those submitted."""
    counters = RunCounters()
    counters.on_submit(1, "w", tasks=2, now=0.0)
    counters.on_submit(2, "x", tasks=19, now=0.0)
    for task_end in ("retried", "retried", "failed", "failed"):
        counters.on_completion(1, 7, 1.0, 2.0, {}, outcome=task_end)
    counters.on_completion(2, 7, 2.0, 3.0, {}, outcome="done")
    snap = counters.snapshot(now=5.0)
    by_id = {wf["id"]: wf for wf in snap["workflows"]}
    assert (by_id[1]["tasks_done"], by_id[1]["tasks_failed"], by_id[1]["attempts"]) == (0, 2, 4)
    assert by_id[1]["tasks"] == 2
    overall = snap["overall"]
    assert overall["tasks"] == 21 and overall["tasks_done"] == 1 and overall["attempts"] == 5


def test_the_workflows_requests_and_those_outside_them_add_up_to_the_overall() -> None:
    counters = RunCounters()
    counters.on_request("register")  # before any workflow
    counters.on_request("request")
    counters.on_submit(1, "w", tasks=1, now=1.0)
    counters.on_request("request")
    counters.on_finish(1, now=2.0)
    counters.on_request("deregister")  # after it
    snap = counters.snapshot(now=3.0)
    outside = snap["overall"]["requests_outside_workflows"]
    assert outside == {"deregister": 1, "register": 1, "request": 1}
    inside = sum(wf["requests_total"] for wf in snap["workflows"])
    assert inside + sum(outside.values()) == snap["overall"]["requests_total"] == 4


def test_masters_and_phases_keep_at_most_max_sites_the_least_recent_leaving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(counters_module, "MAX_SITES", 3)
    counters = RunCounters()
    for site in ("A", "B", "C", "D"):
        counters.on_master(site, 1, 1, 0.0)
        counters.on_phases(site, [("sync", 1.0)])
    counters.on_master("B", 2, 2, 1.0)  # B heard of again: C leaves next, not B
    counters.on_phases("B", [("sync", 1.0)])
    counters.on_master("E", 1, 1, 2.0)
    counters.on_phases("E", [("sync", 1.0)])
    snapshot = counters.snapshot(3.0)
    assert sorted(snapshot["masters"]) == ["B", "D", "E"]
    assert sorted(snapshot["phases"]) == ["B", "D", "E"] and snapshot["phases"]["B"]["sync"] == 2
