"""Sfiligoi 2013 (Sfiligoi et al., "Minimizing draining waste through extending the lifetime of
pilot jobs in Grid environments", CHEP 2013): a site takes CPUs back in the middle of a workflow and
the real victim policy chooses which pilots drain (``sim.vacate``).

The pilots pull from our Task Queue (pre-DHT), tasks last N(198 s, 60 s) so that after a few
tasks the pilots' jobs end at different times; ``VACATE_AT`` s after the submission the site
asks for ``VACATE_CPUS`` CPUs.  ``completion`` picks the pilots whose jobs are expected to end
first (LAST_EXP_JOB_END from their ``.pilot.ad``); ``waste`` with one-CPU pilots has no waste to
tell them apart and falls to slot order (blind to the jobs' ends); ``cache`` spares the pilots
whose caches hold what tasks still to run will read (CACHED_INPUT_NEEDED_MB, then the
``completion`` order), and the runs count the storage-element re-reads each policy caused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from glidein_ext.sim.calibration import CostModel
from glidein_ext.sim.config import SimConfig, Storage
from glidein_ext.sim.engine import SimResult
from glidein_ext.sim.experiments.base import METRICS, Job, aggregate, rows_of, write_csv
from glidein_ext.sim.experiments.plots import Reference, bars

BASE = SimConfig(
    architecture="pre-dht",
    sites=1,
    runtime_mean=198.0,
    runtime_sd=60.0,
    storage=Storage(0.0, 0.0),
    victim_policy="completion",
)
POLICIES = ("completion", "waste", "cache")
WORKFLOWS = ("w1", "w2", "w3")
DRAIN = ("drain_mean", "drain_max", "drained", "se_rereads", "victims_needed_mb", "se_reads")
BASELINE = "none"  # the same runs without the vacate: the SE reads the workflow makes anyway


def _size(quick: bool) -> tuple[int, int, float, int]:
    """(pilots, tasks, vacate_at, vacate_cpus)"""
    return (40, 300, 500.0, 10) if quick else (200, 2000, 900.0, 50)


def vacate_jobs(quick: bool, seed: int) -> list[Job]:
    pilots, tasks, at, cpus = _size(quick)
    seeds = (seed,) if quick else (seed, seed + 1, seed + 2)
    return [
        Job(
            {"policy": policy, "pilots": pilots, "cpus": cpus, "workflow": w, "seed": s},
            BASE.replace(
                pilots=pilots,
                tasks=tasks,
                workflow=w,
                seed=s,
                vacate_at=at if policy != BASELINE else 0.0,
                vacate_cpus=cpus if policy != BASELINE else 0,
                victim_policy=policy if policy != BASELINE else "completion",
            ),
        )
        for policy in (*POLICIES, BASELINE)
        for w in WORKFLOWS
        for s in seeds
    ]


def vacate_report(results: list[tuple[Job, SimResult]], out: Path, costs: CostModel) -> list[str]:
    del costs
    rows = rows_of(results)
    for row, (_, result) in zip(rows, results, strict=True):
        row.update({name: result.summary.get(name) for name in DRAIN})
    # The vacate's cost to the SE: this run's SE reads less those of the same run without it.
    anyway = {(r["workflow"], r["seed"]): r["se_reads"] for r in rows if r["policy"] == BASELINE}
    for row in rows:
        base = anyway.get((row["workflow"], row["seed"]))
        if row["policy"] != BASELINE and base is not None:
            row["extra_se_reads"] = row["se_reads"] - base
    write_csv(out / "runs.csv", rows)
    rows = [r for r in rows if r["policy"] != BASELINE]
    summary = aggregate(rows, ("policy",), (*METRICS, *DRAIN, "extra_se_reads"))
    write_csv(out / "summary.csv", summary)
    by_workflow = aggregate(rows, ("policy", "workflow"), (*DRAIN, "extra_se_reads"))
    write_csv(out / "rereads.csv", by_workflow)
    by = {r["policy"]: r for r in summary}
    categories = ["mean per CPU", "last CPU"]
    labels = {
        "completion": "completion",
        "waste": "waste (one-CPU pilots: slot order)",
        "cache": "cache (CACHED_INPUT_NEEDED_MB, then completion)",
    }
    series = {
        labels[policy]: (
            [by[policy]["drain_mean"], by[policy]["drain_max"]],
            [by[policy]["drain_mean_sem"], by[policy]["drain_max_sem"]],
        )
        for policy in POLICIES
        if policy in by
    }
    bars(
        out / "vacate_drain.png",
        "Sfiligoi 2013: seconds until the site has its CPUs back, by victim policy",
        "seconds from the request",
        categories,
        series,
        [Reference(f"one task's mean length ({BASE.runtime_mean:.0f} s)", BASE.runtime_mean)],
    )
    cells = {(r["policy"], r["workflow"]): r for r in by_workflow}
    bars(
        out / "vacate_rereads.png",
        "Sfiligoi 2013 + Hasham 2011: SE reads the vacate added, by victim policy",
        "SE reads, less the same run without the vacate",
        [w.upper() for w in WORKFLOWS],
        {
            labels[policy]: (
                [_value(cells, policy, w, "extra_se_reads") for w in WORKFLOWS],
                [_value(cells, policy, w, "extra_se_reads_sem") for w in WORKFLOWS],
            )
            for policy in POLICIES
            if policy in by
        },
    )
    return vacate_notes(summary)


def vacate_notes(summary: list[dict[str, Any]]) -> list[str]:
    """Each policy's drain times and SE reads, then the claims: the pilots' expected job end
    (``completion``) gives the CPUs back sooner than slot order (Sfiligoi 2013), and ``cache``
    vacates no pilot whose cache tasks still to run need."""
    by = {r["policy"]: r for r in summary}
    notes = [
        f"{policy}: CPUs back in {_fmt(by[policy]['drain_mean'])} s on average, the last in "
        f"{_fmt(by[policy]['drain_max'])} s; {_fmt(by[policy]['extra_se_reads'])} SE reads more "
        f"than without the vacate, {_fmt(by[policy]['se_rereads'])} of the victims' cached files "
        f"(victims held {_fmt(by[policy]['victims_needed_mb'])} MB that tasks still to run need)"
        for policy in POLICIES
        if policy in by
    ]
    if "completion" in by and "waste" in by:
        sooner = all(
            _number(by["completion"][key]) < _number(by["waste"][key])
            for key in ("drain_mean", "drain_max")
        )
        notes.append(
            "Sfiligoi 2013: the pilots' expected job end (completion) gives the CPUs back sooner "
            "than slot order (waste on one-CPU pilots), on average and the last: "
            f"{'holds' if sooner else 'does not hold'} here ("
            f"{_fmt(by['completion']['drain_mean'])} / {_fmt(by['completion']['drain_max'])} s "
            f"against {_fmt(by['waste']['drain_mean'])} / {_fmt(by['waste']['drain_max'])} s)"
        )
    if "cache" in by:
        spared = _number(by["cache"]["victims_needed_mb"]) == 0.0
        notes.append(
            "cache: its victims hold nothing that tasks still to run need: "
            f"{'holds' if spared else 'does not hold'} here "
            f"({_fmt(by['cache']['victims_needed_mb'])} MB)"
        )
    return notes


def _number(value: object) -> float:
    """A summary's value as a number; NaN (never less, never equal) when there is none."""
    return float(value) if isinstance(value, (int, float)) else float("nan")


def _value(cells: dict[tuple[str, str], dict[str, Any]], policy: str, w: str, key: str) -> float:
    value = cells.get((policy, w), {}).get(key)
    return float(value) if isinstance(value, (int, float)) else 0.0


def _fmt(value: object) -> str:
    return "-" if not isinstance(value, float) else f"{value:.1f}"
