"""What an experiment is (a list of runs, then the tables and figures made of their results) and
the helpers they share: running the runs, CSV files, means and standard deviations."""

from __future__ import annotations

import csv
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from glidein_ext.sim.calibration import CostModel
from glidein_ext.sim.config import SimConfig
from glidein_ext.sim.engine import SimResult, simulate

Key = dict[str, Any]


@dataclass(frozen=True)
class Job:
    """One run of an experiment: what distinguishes it (its CSV columns) and its configuration."""

    key: Key
    config: SimConfig


@dataclass(frozen=True)
class Experiment:
    """``jobs(quick, seed)`` lists the runs; ``report(results, out, costs)`` writes the CSV
    files and figures and returns the notes (targets met or missed, with why)."""

    name: str
    summary: str
    jobs: Callable[[bool, int], list[Job]]
    report: Callable[[list[tuple[Job, SimResult]], Path, CostModel], list[str]]


METRICS = (
    "tasks",
    "requests_per_task",
    "delay_median",
    "delay_p99",
    "turnaround",
    "first_burst",
    "cache_hit",
    "local_hit",
    "stage_in_mean",
    "failures",
    "rounds",
    "queue_max",
)


def run_parameters(name: str, quick: bool, seed: int, costs: str, jobs: Sequence[Job]) -> list[str]:
    """notes.txt's head: how the experiment was run, and every SimConfig parameter of its runs
    (one value, or the values the runs vary over)."""
    lines = [
        f"Experiment {name}: {'--quick' if quick else 'full size'}, --seed {seed}, "
        f"{len(jobs)} run(s); service times: {costs}.",
        "Parameters of the runs (SimConfig; several values: the runs vary over them):",
    ]
    for item in fields(SimConfig):
        seen: list[str] = []
        for job in jobs:
            shown = str(getattr(job.config, item.name))
            if shown not in seen:
                seen.append(shown)
        lines.append(f"  {item.name}: {', '.join(seen) if seen else '(no run)'}")
    lines.append("Results and targets (met or missed):")
    return lines


def run_jobs(
    jobs: Sequence[Job], costs: CostModel, advance: Callable[[int], None] = lambda n: None
) -> list[tuple[Job, SimResult]]:
    """Run every job in order; ``advance(1)`` after each (the CLI's progress bar)."""
    results = []
    for job in jobs:
        results.append((job, simulate(job.config, costs)))
        advance(1)
    return results


def rows_of(results: Iterable[tuple[Job, SimResult]]) -> list[dict[str, Any]]:
    """One row per run: its key, then the metrics."""
    rows = []
    for job, result in results:
        row = dict(job.key)
        row.update({name: result.summary.get(name) for name in METRICS})
        rows.append(row)
    return rows


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return "" if value is None else value


# The unit of each measured column whose name does not say it already: the CSV header is
# ``NAME_UNIT`` (``delay_median_s``), its standard deviation of the mean likewise
# (``delay_median_sem_s``).  Counts (tasks, failures, rounds, requests_per_task...) have none.
UNITS = {
    "delay_median": "s",
    "delay_p99": "s",
    "turnaround": "s",
    "first_burst": "s",
    "stage_in_mean": "s",
    "drain_mean": "s",
    "drain_max": "s",
    "t": "s",
    "cache_hit": "fraction",
    "local_hit": "fraction",
    "utilization": "fraction",
    "idle_utilization": "fraction",
}


def header(name: str) -> str:
    """A column's CSV header: its name with its unit (``UNITS``)."""
    base = name[: -len("_sem")] if name.endswith("_sem") else name
    unit = UNITS.get(base)
    return f"{name}_{unit}" if unit else name


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """The rows as CSV, one column per key (in first-seen order), headed by ``header``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    columns: list[str] = []
    for row in rows:
        columns += [name for name in row if name not in columns]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([header(name) for name in columns])
        for row in rows:
            writer.writerow([_cell(row.get(name)) for name in columns])
    return path


def aggregate(
    rows: Sequence[Mapping[str, Any]], by: Sequence[str], metrics: Sequence[str] = METRICS
) -> list[dict[str, Any]]:
    """Mean and standard deviation of the mean of each metric over the rows with equal ``by``
    (the seeds), as the papers' error bars ("the standard deviation of the mean")."""
    groups: defaultdict[tuple[Any, ...], list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[tuple(row[name] for name in by)].append(row)
    out = []
    for values, members in groups.items():
        item: dict[str, Any] = dict(zip(by, values, strict=True))
        item["runs"] = len(members)
        for metric in metrics:
            numbers = [
                float(m[metric])
                for m in members
                if m.get(metric) is not None and not math.isnan(float(m[metric]))
            ]
            item[metric] = statistics.fmean(numbers) if numbers else None
            spread = statistics.stdev(numbers) / math.sqrt(len(numbers)) if len(numbers) > 1 else 0
            item[f"{metric}_sem"] = spread if numbers else None
        out.append(item)
    return out
