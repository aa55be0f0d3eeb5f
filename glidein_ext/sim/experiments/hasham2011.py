"""Hasham 2011 (Hasham, Delgado Peris et al., "CMS Workflow Execution using Intelligent Job
Scheduling and Data Access Strategies", IEEE TNS 2011), section V: W1/W2/W3 under the SE
conditions of Table I (d1f1, d2f2, d3f1, d3f3), the cache schemes C1/C2/C3 (and no cache), and
the three submission mechanisms (direct, pilots already running, the PilotMonitor).

The seed does not state its jobs' length or how its delay factor maps to seconds: tasks run 10
minutes on average here, and a delay factor of 1 is 600 s (so d3 adds about 5 minutes to each SE
access, d1 about 6 s).  120 pilots, 4 per worker node (cache-per-host), 700 MB files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from glidein_ext.sim.calibration import CostModel
from glidein_ext.sim.config import MB, SimConfig, Storage
from glidein_ext.sim.engine import SimResult
from glidein_ext.sim.experiments.base import Job, aggregate, rows_of, write_csv
from glidein_ext.sim.experiments.plots import Panel, Reference, bars, thin, timeline

BASE = SimConfig(
    pilots=120,
    pilots_per_host=4,
    tasks=160,
    file_size=700 * MB,
    runtime_mean=600.0,
    runtime_sd=60.0,
    architecture="pre-dht",
)
CONDITIONS = ("d1f1", "d2f2", "d3f1", "d3f3")
SCHEMES = ("C1", "C2", "C3")
WORKFLOWS = ("w1", "w2", "w3")


def _config(workflow: str, condition: str, scheme: str, submission: str, seed: int) -> SimConfig:
    tasks = 160 if workflow == "w1" else 120
    return BASE.replace(
        workflow=workflow,
        tasks=tasks,
        storage=Storage.condition(condition),
        scheme=scheme,
        submission=submission,
        seed=seed,
    )


def _seeds(quick: bool, seed: int) -> tuple[int, ...]:
    return (seed,) if quick else (seed, seed + 1, seed + 2)


def _job(workflow: str, condition: str, scheme: str, submission: str, seed: int) -> Job:
    key = {
        "workflow": workflow,
        "condition": condition,
        "scheme": scheme,
        "submission": submission,
        "seed": seed,
    }
    return Job(key, _config(workflow, condition, scheme, submission, seed))


# --- figure 7: running jobs over time, W3, three submission mechanisms ---

MECHANISMS = (("direct", "none"), ("running", "C1"), ("monitor", "C1"))


def submission_jobs(quick: bool, seed: int) -> list[Job]:
    return [
        _job("w3", "d1f1", scheme, submission, s)
        for submission, scheme in MECHANISMS
        for s in _seeds(quick, seed)
    ]


def submission_report(
    results: list[tuple[Job, SimResult]], out: Path, costs: CostModel
) -> list[str]:
    rows = rows_of(results)
    write_csv(out / "runs.csv", rows)
    write_csv(out / "summary.csv", aggregate(rows, ("submission",)))
    lines = {}
    for job, result in results:
        name = str(job.key["submission"])
        if name in lines:
            continue  # the first seed's run of each mechanism
        rec = result.recorder
        start = rec.submitted_at or 0.0
        lines[name] = thin([(t - start, float(n)) for t, n in rec.running_series])
    timeline(
        out / "fig7_running_jobs.png",
        "Hasham 2011 fig 7: running jobs, W3 (direct, pilots running, PilotMonitor)",
        [Panel("running jobs", lines)],
    )
    return []


# --- figures 8-11: stage-in time and turnaround under the SE conditions, cache or not ---


def storage_jobs(quick: bool, seed: int) -> list[Job]:
    jobs = [
        _job("w1", condition, scheme, "running", s)
        for condition in CONDITIONS
        for scheme in ("C1", "none")
        for s in _seeds(quick, seed)
    ]
    jobs += [
        _job(workflow, "d3f3", scheme, "running", s)
        for workflow in ("w2", "w3")
        for scheme in ("C1", "none")
        for s in _seeds(quick, seed)
    ]
    return jobs


def _pairs(
    summary: list[dict[str, Any]], x: str, xs: list[str], where: dict[str, str], metric: str
) -> dict[str, tuple[list[Any], list[Any]]]:
    series = {}
    for scheme, label in (("C1", "cache (C1)"), ("none", "no cache")):
        found = {
            r[x]: r
            for r in summary
            if r["scheme"] == scheme and all(r[k] == v for k, v in where.items())
        }
        series[label] = (
            [found[v][metric] if v in found else None for v in xs],
            [found[v][f"{metric}_sem"] if v in found else None for v in xs],
        )
    return series


def storage_report(results: list[tuple[Job, SimResult]], out: Path, costs: CostModel) -> list[str]:
    rows = rows_of(results)
    write_csv(out / "runs.csv", rows)
    summary = aggregate(rows, ("workflow", "condition", "scheme"))
    write_csv(out / "summary.csv", summary)
    # Figs. 8-9: W1 across the storage conditions; Figs. 10-11: the workflows under d3f3.
    conditions, workflows = list(CONDITIONS), list(WORKFLOWS)
    for first, shown, axis, xs, where in (
        (8, "W1", "condition", conditions, {"workflow": "w1"}),
        (10, "d3f3", "workflow", workflows, {"condition": "d3f3"}),
    ):
        for fig, stem, metric, ylabel in (
            (first, "stage_in", "stage_in_mean", "stage-in time per job (s)"),
            (first + 1, "turnaround", "turnaround", "workflow turnaround (s)"),
        ):
            bars(
                out / f"fig{fig}_{stem}.png",
                f"Hasham 2011 fig{fig}: {shown}, {ylabel}",
                ylabel,
                xs,
                _pairs(summary, axis, xs, where, metric),
            )
    by = {(r["workflow"], r["condition"], r["scheme"]): r for r in summary}
    notes = []
    found = [by.get(("w1", c, "C1"), {}).get("turnaround") for c in ("d3f1", "d2f2", "d3f3")]
    cached = [float(v) for v in found if v is not None]
    if len(cached) == 3:
        holds = cached[0] < cached[1] and cached[0] < cached[2]
        notes.append(
            "Hasham 2011: W1 turnaround under d3f1 below d2f2 and d3f3 (failures cost more than "
            f"delays): {'holds' if holds else 'does not hold'} here "
            f"({', '.join(_fmt(v) for v in cached)} s)"
        )
    return notes


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.4g}"


# --- figure 12: cache hit ratio, C1/C2/C3 x W1/W2/W3 ---


def cache_jobs(quick: bool, seed: int) -> list[Job]:
    return [
        _job(workflow, "d1f1", scheme, "running", s)
        for workflow in WORKFLOWS
        for scheme in SCHEMES
        for s in _seeds(quick, seed)
    ]


def cache_report(results: list[tuple[Job, SimResult]], out: Path, costs: CostModel) -> list[str]:
    rows = rows_of(results)
    write_csv(out / "runs.csv", rows)
    summary = aggregate(rows, ("workflow", "scheme"))
    write_csv(out / "summary.csv", summary)
    series = {}
    for scheme in SCHEMES:
        found = {r["workflow"]: r for r in summary if r["scheme"] == scheme}
        series[scheme] = (
            [found[w]["cache_hit"] if w in found else None for w in WORKFLOWS],
            [found[w]["cache_hit_sem"] if w in found else None for w in WORKFLOWS],
        )
    bars(
        out / "fig12_cache_hit.png",
        "Hasham 2011 fig 12: cache hit ratio (C1 per host, C2 single pilot, C3 no waitForData)",
        "cache hit ratio",
        list(WORKFLOWS),
        series,
        [Reference("Hasham 2011: C2 at most ~50% for W2, W3", 0.5, "C1")],
    )
    by = {(r["workflow"], r["scheme"]): r["cache_hit"] for r in summary}
    return [
        f"{w}: C1 {_fmt(by.get((w, 'C1')))}, C2 {_fmt(by.get((w, 'C2')))}, "
        f"C3 {_fmt(by.get((w, 'C3')))}"
        for w in WORKFLOWS
    ]


# --- the whole grid: W x condition x cache x submission ---


def grid_jobs(quick: bool, seed: int) -> list[Job]:
    conditions = ("d1f1", "d3f3") if quick else CONDITIONS
    jobs = []
    for workflow in WORKFLOWS:
        for condition in conditions:
            for s in _seeds(quick, seed):
                jobs.append(_job(workflow, condition, "none", "direct", s))
                for submission in ("running", "monitor"):
                    for scheme in ("none", *SCHEMES):
                        jobs.append(_job(workflow, condition, scheme, submission, s))
    return jobs


def grid_report(results: list[tuple[Job, SimResult]], out: Path, costs: CostModel) -> list[str]:
    rows = rows_of(results)
    write_csv(out / "runs.csv", rows)
    write_csv(
        out / "summary.csv", aggregate(rows, ("workflow", "condition", "scheme", "submission"))
    )
    return []
