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
    return submission_notes(aggregate(rows, ("submission",)))


def submission_notes(summary: list[dict[str, Any]]) -> list[str]:
    """Each mechanism's turnaround and first burst, then figure 7's shape as claims: pilots
    already running start the step-0 jobs at once, the PilotMonitor later, direct submission
    pays the grid's latencies at every step."""
    by = {str(r["submission"]): r for r in summary}
    turnaround = {name: by.get(name, {}).get("turnaround") for name, _ in MECHANISMS}
    burst = {name: by.get(name, {}).get("first_burst") for name, _ in MECHANISMS}
    notes = [
        f"{name}: turnaround {_fmt(turnaround[name])} s, first burst "
        + (
            "none (no pilots: each job is submitted to the grid)"
            if burst[name] is None
            else f"{_fmt(burst[name])} s"
        )
        for name, _ in MECHANISMS
        if name in by
    ]
    notes.append(
        _claim(
            "Hasham 2011 fig 7: pilots already running start the first jobs sooner than the "
            "PilotMonitor (first burst)",
            _below(burst["running"], burst["monitor"]),
            f"{_fmt(burst['running'])} against {_fmt(burst['monitor'])} s",
        )
    )
    notes.append(
        _claim(
            "Hasham 2011 fig 7: turnaround pilots running < PilotMonitor < direct submission",
            _below(turnaround["running"], turnaround["monitor"])
            and _below(turnaround["monitor"], turnaround["direct"]),
            ", ".join(f"{_fmt(turnaround[name])} s" for name in ("running", "monitor", "direct")),
        )
    )
    return notes


def _below(low: Any, high: Any) -> bool:
    return low is not None and high is not None and float(low) < float(high)


def _less(value: Any, minus: Any) -> float | None:
    """``value - minus``; None when either is missing."""
    return None if value is None or minus is None else float(value) - float(minus)


def _claim(text: str, holds: bool, numbers: str) -> str:
    """One of the paper's statements checked against this run: holds or does not hold."""
    return f"{text}: {'holds' if holds else 'does not hold'} here ({numbers})"


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
    storage_figures(summary, out)
    return storage_notes(summary)


def storage_figures(summary: list[dict[str, Any]], out: Path) -> None:
    """Figs. 8-9: W1 across the storage conditions; Figs. 10-11: the workflows under d3f3.
    The stage-in bars are valued: with the cache they are too short to read (under a second
    against minutes without)."""
    conditions, workflows = list(CONDITIONS), list(WORKFLOWS)
    for first, shown, axis, xs, where in (
        (8, "W1", "condition", conditions, {"workflow": "w1"}),
        (10, "d3f3", "workflow", workflows, {"condition": "d3f3"}),
    ):
        for fig, stem, metric, ylabel, valued in (
            (first, "stage_in", "stage_in_mean", "stage-in time per job (s)", True),
            (first + 1, "turnaround", "turnaround", "workflow turnaround (s)", False),
        ):
            bars(
                out / f"fig{fig}_{stem}.png",
                f"Hasham 2011 fig{fig}: {shown}, {ylabel}",
                ylabel,
                xs,
                _pairs(summary, axis, xs, where, metric),
                values=valued,
            )


def storage_notes(summary: list[dict[str, Any]]) -> list[str]:
    """W1's stage-in time and turnaround per condition, cache against none, then the paper's
    statements on figures 8-11 (Hasham 2011 section V.B) as claims."""
    by = {(r["workflow"], r["condition"], r["scheme"]): r for r in summary}

    def value(workflow: str, condition: str, scheme: str, metric: str) -> Any:
        return by.get((workflow, condition, scheme), {}).get(metric)

    notes = []
    for condition in CONDITIONS:
        shown = [
            f"{label} {_fmt(value('w1', condition, scheme, metric))} s"
            for metric, what in (("stage_in_mean", "stage-in"), ("turnaround", "turnaround"))
            for scheme, label in (("C1", f"{what} cache"), ("none", f"{what} no cache"))
        ]
        notes.append(f"w1 {condition}: {', '.join(shown)}")
    for workflow in ("w2", "w3"):
        notes.append(
            f"{workflow} d3f3: turnaround cache {_fmt(value(workflow, 'd3f3', 'C1', 'turnaround'))}"
            f" s, no cache {_fmt(value(workflow, 'd3f3', 'none', 'turnaround'))} s"
        )
    stage_in = {
        (c, scheme): value("w1", c, scheme, "stage_in_mean")
        for c in CONDITIONS
        for scheme in ("C1", "none")
    }
    notes.append(
        _claim(
            "Hasham 2011 fig 8: the cache shortens W1's stage-in under every condition",
            all(_below(stage_in[(c, "C1")], stage_in[(c, "none")]) for c in CONDITIONS),
            ", ".join(
                f"{c} {_fmt(stage_in[(c, 'C1')])} against {_fmt(stage_in[(c, 'none')])} s"
                for c in CONDITIONS
            ),
        )
    )
    notes.append(
        _claim(
            "Hasham 2011 fig 8: the stage-in grows with the SE's delay only without the cache "
            "(without: d1f1 < d2f2 < d3f1, d3f3; with: every condition below d1f1's without)",
            _below(stage_in[("d1f1", "none")], stage_in[("d2f2", "none")])
            and _below(stage_in[("d2f2", "none")], stage_in[("d3f1", "none")])
            and _below(stage_in[("d2f2", "none")], stage_in[("d3f3", "none")])
            and all(_below(stage_in[(c, "C1")], stage_in[("d1f1", "none")]) for c in CONDITIONS),
            "without: "
            + ", ".join(f"{_fmt(stage_in[(c, 'none')])}" for c in CONDITIONS)
            + " s; with: "
            + ", ".join(f"{_fmt(stage_in[(c, 'C1')])}" for c in CONDITIONS)
            + " s",
        )
    )
    cached = {c: value("w1", c, "C1", "turnaround") for c in ("d3f1", "d2f2", "d3f3")}
    notes.append(
        _claim(
            "Hasham 2011 fig 9: W1's turnaround under d3f1 below d2f2 and d3f3 (failures cost "
            "more than delays)",
            _below(cached["d3f1"], cached["d2f2"]) and _below(cached["d3f1"], cached["d3f3"]),
            ", ".join(f"{c} {_fmt(v)} s" for c, v in cached.items()),
        )
    )
    gain = {
        w: _less(value(w, "d3f3", "none", "turnaround"), value(w, "d3f3", "C1", "turnaround"))
        for w in WORKFLOWS
    }
    notes.append(
        _claim(
            "Hasham 2011 figs 10, 11: under d3f3 the cache saves W2 and W3 less turnaround than W1",
            _below(gain["w2"], gain["w1"]) and _below(gain["w3"], gain["w1"]),
            ", ".join(f"{w.upper()} {_fmt(g)} s" for w, g in gain.items()),
        )
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
    return cache_notes(summary)


def cache_notes(summary: list[dict[str, Any]]) -> list[str]:
    """The cache hit ratio per workflow and scheme, then the paper's statements on figure 12
    (Hasham 2011 section V.C) as claims."""
    by = {(r["workflow"], r["scheme"]): r["cache_hit"] for r in summary}
    notes = [
        f"{w}: C1 {_fmt(by.get((w, 'C1')))}, C2 {_fmt(by.get((w, 'C2')))}, "
        f"C3 {_fmt(by.get((w, 'C3')))}"
        for w in WORKFLOWS
    ]

    def hit(w: str, scheme: str) -> str:
        return f"{w.upper()} {scheme} {_fmt(by.get((w, scheme)))}"

    w1 = (by.get(("w1", "C1")), by.get(("w1", "C2")))
    notes.append(
        _claim(
            "Hasham 2011 fig 12: W1 hits as often with C1 as with C2 (one-to-one, waitForData)",
            None not in w1 and abs(float(w1[0] or 0) - float(w1[1] or 0)) < 1e-9,
            f"{hit('w1', 'C1')}, {hit('w1', 'C2')}",
        )
    )
    notes.append(
        _claim(
            "Hasham 2011 fig 12: without waitForData (C3) the ratio drops, every workflow",
            all(_below(by.get((w, "C3")), by.get((w, "C1"))) for w in WORKFLOWS),
            ", ".join(f"{hit(w, 'C3')} against C1 {_fmt(by.get((w, 'C1')))}" for w in WORKFLOWS),
        )
    )
    notes.append(
        _claim(
            "Hasham 2011 fig 12: C2 reaches at most 50% for W2 and W3",
            all(
                by.get((w, "C2")) is not None and float(by[(w, "C2")]) <= 0.5 + 1e-9
                for w in ("w2", "w3")
            ),
            f"{hit('w2', 'C2')}, {hit('w3', 'C2')}",
        )
    )
    notes.append(
        _claim(
            "Hasham 2011 fig 12: C1 (a host's pilots share) at least C2 for W2 and W3",
            all(
                None not in (by.get((w, "C1")), by.get((w, "C2")))
                and float(by[(w, "C1")]) >= float(by[(w, "C2")]) - 1e-9
                for w in ("w2", "w3")
            ),
            ", ".join(f"{hit(w, 'C1')} against C2 {_fmt(by.get((w, 'C2')))}" for w in ("w2", "w3")),
        )
    )
    return notes


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
