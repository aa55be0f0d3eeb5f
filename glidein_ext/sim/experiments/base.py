"""What an experiment is (a list of runs, then the tables and figures made of their results) and
the helpers they share: running the runs, CSV files, means and standard deviations."""

from __future__ import annotations

import csv
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
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


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    columns: list[str] = []
    for row in rows:
        columns += [name for name in row if name not in columns]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({name: _cell(row.get(name)) for name in columns})
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
