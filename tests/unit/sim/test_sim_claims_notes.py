"""notes.txt checks the papers' statements against the run (Hasham 2011 figures 7-12, Sfiligoi
2013) and the distributed architecture's targets at every size of the scaling runs: each line
says holds / does not hold, met / missed, with the numbers."""

from __future__ import annotations

from typing import Any

from glidein_ext.sim.experiments import delgado2014, hasham2011, sfiligoi2013


def _verdicts(notes: list[str]) -> dict[str, bool]:
    """Each claim's opening words: whether it holds."""
    found = {}
    for line in notes:
        if ": holds here" in line or ": does not hold here" in line:
            found[line.split(":")[1].strip()] = ": holds here" in line
    return found


def test_figure_7s_shape_holds_and_a_reversed_order_does_not() -> None:
    summary = [
        {"submission": "direct", "turnaround": 3715.0, "first_burst": None},
        {"submission": "running", "turnaround": 1451.0, "first_burst": 3.6},
        {"submission": "monitor", "turnaround": 1729.0, "first_burst": 377.0},
    ]
    notes = hasham2011.submission_notes(summary)
    assert "direct: turnaround 3715 s, first burst none" in notes[0]
    assert "running: turnaround 1451 s, first burst 3.6 s" in notes
    assert len(_verdicts(notes)) == 2 and all(_verdicts(notes).values()), notes
    summary[2]["turnaround"] = 4000.0  # the PilotMonitor after direct submission
    assert list(_verdicts(hasham2011.submission_notes(summary)).values()) == [True, False]


def _storage(stage_in: dict[str, tuple[float, float]]) -> list[dict[str, Any]]:
    rows = []
    for condition, (cached, uncached) in stage_in.items():
        faster = 500.0 if condition == "d3f1" else 0.0  # failures cost more than delays
        for scheme, value, slowest in (("C1", cached, 2000.0), ("none", uncached, 2500.0)):
            turnaround = slowest - faster
            rows.append(
                {
                    "workflow": "w1",
                    "condition": condition,
                    "scheme": scheme,
                    "stage_in_mean": value,
                    "turnaround": turnaround,
                }
            )
    for workflow, gain in (("w2", 100.0), ("w3", 200.0)):
        rows.append(
            {"workflow": workflow, "condition": "d3f3", "scheme": "C1", "turnaround": 1000.0}
        )
        rows.append(
            {
                "workflow": workflow,
                "condition": "d3f3",
                "scheme": "none",
                "turnaround": 1000.0 + gain,
            }
        )
    return rows


def test_figures_8_to_11_claims_are_judged_from_the_summary() -> None:
    good = {"d1f1": (0.9, 6.4), "d2f2": (0.9, 47.0), "d3f1": (0.9, 152.0), "d3f3": (0.9, 148.0)}
    notes = hasham2011.storage_notes(_storage(good))
    assert notes[0] == (
        "w1 d1f1: stage-in cache 0.9 s, stage-in no cache 6.4 s, turnaround cache 2000 s, "
        "turnaround no cache 2500 s"
    )
    verdicts = _verdicts(notes)
    assert len(verdicts) == 4 and all(verdicts.values()), notes
    bad = {**good, "d2f2": (60.0, 47.0)}  # the cache slower than none under d2f2
    verdicts = _verdicts(hasham2011.storage_notes(_storage(bad)))
    assert list(verdicts.values()) == [False, False, True, True]


def test_figure_12s_claims_hold_on_the_papers_pattern_and_fail_without_it() -> None:
    hits = {
        ("w1", "C1"): 1.0,
        ("w1", "C2"): 1.0,
        ("w1", "C3"): 0.90,
        ("w2", "C1"): 0.52,
        ("w2", "C2"): 0.50,
        ("w2", "C3"): 0.47,
        ("w3", "C1"): 0.51,
        ("w3", "C2"): 0.50,
        ("w3", "C3"): 0.31,
    }

    def summary() -> list[dict[str, Any]]:
        return [{"workflow": w, "scheme": s, "cache_hit": v} for (w, s), v in hits.items()]

    notes = hasham2011.cache_notes(summary())
    assert notes[:3] == [
        "w1: C1 1, C2 1, C3 0.9",
        "w2: C1 0.52, C2 0.5, C3 0.47",
        "w3: C1 0.51, C2 0.5, C3 0.31",
    ]
    assert len(_verdicts(notes)) == 4 and all(_verdicts(notes).values()), notes
    hits[("w2", "C2")] = 0.6  # above 50%, and above C1
    assert list(_verdicts(hasham2011.cache_notes(summary())).values()) == [
        True,
        True,
        False,
        False,
    ]


def _policy(policy: str, mean: float, last: float, needed: float) -> dict[str, Any]:
    return {
        "policy": policy,
        "drain_mean": mean,
        "drain_max": last,
        "extra_se_reads": 11.0,
        "se_rereads": 40.0,
        "victims_needed_mb": needed,
    }


def test_the_victim_policies_notes_judge_sfiligoi_2013s_claim_and_the_cache_policy() -> None:
    summary = [
        _policy("completion", 50.7, 156.0, 877.8),
        _policy("waste", 112.7, 267.2, 1166.7),
        _policy("cache", 60.5, 179.5, 0.0),
    ]
    notes = sfiligoi2013.vacate_notes(summary)
    assert notes[0].startswith("completion: CPUs back in 50.7 s on average, the last in 156.0 s")
    assert notes[3].endswith(": holds here (50.7 / 156.0 s against 112.7 / 267.2 s)")
    assert notes[4] == (
        "cache: its victims hold nothing that tasks still to run need: holds here (0.0 MB)"
    )
    slower = [_policy("completion", 50.7, 300.0, 1.0), summary[1], _policy("cache", 1, 1, 5.0)]
    notes = sfiligoi2013.vacate_notes(slower)
    assert "does not hold here" in notes[3] and "does not hold here" in notes[4]


def test_the_scaling_notes_judge_the_distributed_targets_at_every_size_run_by_run() -> None:
    def run(size: str, workflow: str, requests: float) -> dict[str, Any]:
        return {
            "series": delgado2014.SCALED,
            "size": size,
            "workflow": workflow,
            "seed": 0,
            "requests_per_task": requests,
            "delay_median": 0.3,
            "first_burst": 0.5,
        }

    rows = [run("small", "w1", 0.8), run("small", "w3", 1.2), run("large", "w1", 0.4)]
    rows.append({**run("large", "w1", 9.0), "series": "pre-DHT (ours)"})  # not judged
    notes = delgado2014.scaling_targets(rows, ["small", "large"])
    assert len(notes) == 6
    assert notes[0].startswith(
        "distributed (ours) at small: requests_per_task <= 1 in each of 2 runs: missed ("
    )
    assert notes[0].endswith("the worst 1.2 (w3, seed 0)")
    assert notes[3] == (
        "distributed (ours) at large: requests_per_task <= 1 in each of 1 runs: met; "
        "the worst 0.4 (w1, seed 0)"
    )
    assert all(": met;" in line for line in notes[1:3] + notes[4:])
