"""The scaling experiment's notes.txt says what was run, with which parameters, where the
reference lines come from, and the largest size's numbers (it used to be empty)."""

from __future__ import annotations

from glidein_ext.sim.calibration import REFERENCE
from glidein_ext.sim.experiments.delgado2014 import SERIES, scaling_notes


def test_scaling_notes_describe_the_runs_parameters_references_and_results() -> None:
    rows = [
        {"series": name, "size": size, "workflow": wf, "seed": seed}
        for name in SERIES
        for size in ("20 p / 60 t", "40 p / 150 t")
        for wf in ("w1", "w2", "w3")
        for seed in (0,)
    ]
    summary = [
        {
            "series": name,
            "size": "40 p / 150 t",
            "requests_per_task": 3.25,
            "delay_median": 0.5,
            "turnaround": 120.0,
            "cache_hit": None,
        }
        for name in SERIES
    ]
    notes = scaling_notes(rows, summary, ["20 p / 60 t", "40 p / 150 t"], REFERENCE)
    text = "\n".join(notes)
    assert f"Runs: {len(rows)} = {len(SERIES)} series x 2 sizes x 3 workflows" in text
    assert "Sizes (pilots / tasks): 20 p / 60 t, 40 p / 150 t." in text
    assert "figure 2" in text and "figure 3" in text and "figure 7" in text
    assert "the reference calibration" in text
    assert "At 40 p / 150 t" in text
    assert (
        "  distributed (ours): requests/task 3.25, median delay 0.5, turnaround 120, "
        "cache hit n/a" in notes
    )
