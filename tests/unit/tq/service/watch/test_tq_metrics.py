"""The exposition of a collector fed with plain values, parsed back with prometheus_client's own
parser (the requests' kinds it counts by: ``test_tq_counters``)."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from glidein_ext.tq.service.watch.insight import Gauges
from glidein_ext.tq.service.watch.metrics import NAMES, Metrics, StateCollector
from glidein_ext.tq.service.watch.stuck import BusyPilot, Snapshot, StuckDetector, Thresholds


def test_state_collector_exports_every_named_family() -> None:
    detector = StuckDetector(Thresholds(silent_after=1))
    detector.observe(Snapshot(now=100, busy=[BusyPilot(1, "T1", 2, 0)]))
    counters: dict[str, Any] = {
        "overall": {
            "rounds": {"n": 2, "rank_sum": 3.5, "served": 4},
            "inputs": {"cache": 1, "host": 0, "peer": 2, "se": 3},
        },
        "masters": {"T1": [{"pilot_id": 1, "epoch": 1, "at": 0.0}]},
        "phases": {"T1": {"sync": 1.5, "solve": 0.25}},
    }
    metrics = Metrics()
    metrics.add_state(
        StateCollector(
            lambda: Gauges(
                {("1:w", "done"): 3},
                {("T1", "idle"): 2},
                [{"site": "T1", "master_id": 1, "epoch": 4, "master_seen": 99.0}],
            ),
            lambda: counters,
            lambda: {("T1", "ok"): 3},
            [],
            detector,
        )
    )
    metrics.requests.labels("request", "200").inc()
    metrics.durations.labels("request").observe(0.001)
    body, content_type = metrics.exposition()
    assert content_type.startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert set(NAMES) <= set(families), set(NAMES) - set(families)
    epoch = families["glidein_ext_tq_site_master_epoch"].samples[0]
    assert epoch.labels == {"site": "T1"} and epoch.value == 4
    warnings = {s.labels["kind"]: s.value for s in families["glidein_ext_tq_warnings"].samples}
    assert warnings == {"no-progress": 0, "queued-idle": 0, "silent-pilot": 1}
    (rounds,) = families["glidein_ext_tq_rounds"].samples
    assert rounds.value == 2
    phases = {
        s.labels["phase"]: s.value for s in families["glidein_ext_tq_round_phase_seconds"].samples
    }
    assert phases == {"sync": 1.5, "solve": 0.25}


def test_finished_workflows_and_gone_sites_fold_into_one_series_each() -> None:
    """A finished workflow's tasks count in ``(finished)``, a site without a live pilot in
    ``(other)`` (its pilots, completions, grants and phases); its master's gauges leave."""
    counters: dict[str, Any] = {
        "overall": {"rounds": {"n": 0, "rank_sum": 0, "served": 0}, "inputs": {}},
        "masters": {"GONE": [{}], "GONE2": [{}, {}], "LIVE": [{}]},
        "phases": {"GONE": {"sync": 1.0}, "LIVE": {"sync": 2.0}},
    }
    gauges = Gauges(
        {("1:a", "done"): 3, ("2:b", "failed"): 1, ("3:c", "queued"): 2, ("3:c", "done"): 1},
        {("GONE", "gone"): 2, ("GONE2", "lost"): 1, ("LIVE", "idle"): 1, ("LIVE", "gone"): 4},
        [
            {"site": "GONE", "master_id": None, "epoch": 1, "master_seen": 1.0},
            {"site": "LIVE", "master_id": 7, "epoch": 2, "master_seen": 2.0},
        ],
    )
    completions = {("GONE", "ok"): 5, ("GONE2", "ok"): 1, ("LIVE", "ok"): 2}
    metrics = Metrics()
    collector = StateCollector(lambda: gauges, lambda: counters, lambda: completions, [], None)
    metrics.add_state(collector)
    body, _ = metrics.exposition()
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}

    def values(name: str) -> dict[tuple[str, ...], float]:
        # in the label order of the family: (site or workflow, then state, result or phase)
        first = ("workflow", "site")
        found = {}
        for sample in families[name].samples:
            ordered = sorted(sample.labels.items(), key=lambda kv: kv[0] not in first)
            found[tuple(value for _, value in ordered)] = sample.value
        return found

    assert values("glidein_ext_tq_tasks") == {
        ("(finished)", "done"): 3,
        ("(finished)", "failed"): 1,
        ("3:c", "queued"): 2,
        ("3:c", "done"): 1,
    }
    assert values("glidein_ext_tq_pilots") == {
        ("(other)", "gone"): 2,
        ("(other)", "lost"): 1,
        ("LIVE", "idle"): 1,
        ("LIVE", "gone"): 4,
    }
    assert values("glidein_ext_tq_completions") == {("(other)", "ok"): 6, ("LIVE", "ok"): 2}
    assert values("glidein_ext_tq_masters_granted") == {("(other)",): 3, ("LIVE",): 1}
    assert values("glidein_ext_tq_round_phase_seconds") == {
        ("(other)", "sync"): 1.0,
        ("LIVE", "sync"): 2.0,
    }
    assert values("glidein_ext_tq_site_master") == {("LIVE",): 7}
