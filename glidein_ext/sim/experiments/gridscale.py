"""The CMS global pool's size (100 sites, 150,000 pilots, 1,000,000 tasks): how many Task Queue
instances pre-DHT, centralized and distributed need to keep the first burst under a minute and
the median inter-task delay under a second, at the per-call costs this tree's benches measure and
at a 1 ms budget (``sim.gridscale``, an aggregate model of the simulator's mechanisms: the event
simulator would take hours at this size, docs/results.md).

The runs are the check of the model: the event simulator (``sim.engine``, one Task Queue server)
at sizes it runs in seconds to a minute, each architecture once a size, beside the model's
prediction for the same size and costs (``validation.csv``: each metric's model / simulated and
whether they agree within 20 %, also in the notes).  The report then evaluates the model at the
pool's size for every cost and number of instances (``grid.csv``), finds the fewest instances that
meet both targets (``needed.csv``), and draws them (``gridscale_instances.png``) with the first
burst and the delay against the number of instances (``gridscale_curves.png``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from glidein_ext.sim.calibration import CostModel
from glidein_ext.sim.config import SimConfig, Storage
from glidein_ext.sim.engine import SimResult
from glidein_ext.sim.experiments.base import Job, rows_of, write_csv
from glidein_ext.sim.experiments.plots import _pyplot, bars, legend_outside, save
from glidein_ext.sim.gridscale import (
    ARCHITECTURES,
    CALL_COSTS,
    DELAY_TARGET,
    FIRST_BURST_TARGET,
    SQLITE_MEASURED,
    Estimate,
    Scale,
    estimate,
    instances_needed,
)

POOL = Scale()  # 100 sites, 150,000 pilots, 1,000,000 tasks
VALIDATION = SimConfig(workflow="w1", sites=2, storage=Storage(0.0, 0.0))
COMPARED = ("requests_per_task", "delay_median", "first_burst", "turnaround")
AGREEMENT = 0.2  # the model within 20 % of the simulator, on every metric


def validation_rows(results: list[tuple[Job, SimResult]], costs: CostModel) -> list[dict[str, Any]]:
    """Each run's metrics, simulated and modelled at the run's size and costs (one Task Queue
    instance, as the simulator's one server), with model / simulated and whether the two agree
    within ``AGREEMENT``."""
    checks: list[dict[str, Any]] = []
    for job, result in results:
        config = job.config
        model = estimate(Scale.from_config(config), config.architecture, 1, costs)
        for metric in COMPARED:
            simulated = result.summary.get(metric)
            predicted = float(getattr(model, metric))
            ratio = None
            if simulated and math.isfinite(predicted):
                ratio = predicted / float(simulated)
            agrees = ratio is not None and abs(ratio - 1.0) <= AGREEMENT
            checks.append(
                {
                    "architecture": config.architecture,
                    "pilots": config.pilots,
                    "tasks": config.tasks,
                    "metric": metric,
                    "simulated": simulated,
                    "model": _finite(predicted),
                    "ratio": ratio,
                    "within_20pct": "met" if agrees else "missed",
                }
            )
    return checks


def validation_notes(checks: list[dict[str, Any]]) -> list[str]:
    """One line per architecture and size: each metric's model / simulated, met or missed."""
    lines: list[str] = []
    keys = list(dict.fromkeys((c["architecture"], c["pilots"], c["tasks"]) for c in checks))
    for arch, pilots, tasks in keys:
        mine = [
            c
            for c in checks
            if (c["architecture"], c["pilots"], c["tasks"]) == (arch, pilots, tasks)
        ]
        shown = ", ".join(f"{c['metric']} {_ratio(c['ratio'])}: {c['within_20pct']}" for c in mine)
        lines.append(
            f"model / simulator, {arch} at {pilots:,} pilots and {tasks:,} tasks "
            f"(target: within {AGREEMENT:.0%}): {shown}"
        )
    return lines


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _validation_sizes(quick: bool) -> list[tuple[int, int]]:
    """(pilots, tasks) of the event simulator's runs."""
    return [(200, 600)] if quick else [(200, 600), (1500, 5000)]


# The event simulator's CPU time (one process, ``time.process_time``) on the 2-core development
# machine (docs/results.md, "Grid scale"): (architecture, pilots, tasks, sites, seconds).
SIMULATOR_MEASURED: tuple[tuple[str, int, int, int, float], ...] = (
    ("pre-dht", 1500, 10_000, 2, 8.4),
    ("pre-dht", 3000, 20_000, 2, 21.8),
    ("distributed", 3000, 20_000, 2, 30.1),
    ("distributed", 6000, 40_000, 4, 78.6),
    ("pre-dht", 15_000, 100_000, 2, 117.8),
    ("distributed", 15_000, 100_000, 10, 104.9),
)
# At the pool's size (distributed, ``bench/sim_speed_bench.py --cms``): the whole run's CPU
# seconds, the simulated seconds it covered, the tasks that ended; and the target.
POOL_RUN = (1503.0, 3200.0, 1_000_000)
POOL_TARGET_CPU = 1800.0


def simulator_at_pool_size() -> str:
    """The event simulator at the pool's size: what the whole run cost against the target,
    and the largest run measured below it."""
    cpu, simulated, ended = POOL_RUN
    verdict = "met" if cpu <= POOL_TARGET_CPU else "missed"
    arch, pilots, tasks, sites, seconds = max(SIMULATOR_MEASURED, key=lambda run: (run[2], run[4]))
    return (
        f"the event simulator at the pool's size ({POOL.pilots:,} pilots, {POOL.tasks:,} tasks, "
        f"{POOL.sites} sites, distributed): the whole run, {ended:,} tasks in {simulated:,.0f} "
        f"simulated seconds, took {cpu:,.0f} s of CPU on the 2-core development machine (target "
        f"{POOL_TARGET_CPU / 60:.0f} minutes: {verdict}); a sync reads only the queued tasks "
        "with an input made at some site and the oldest and newest of the others by share, and "
        f"the next largest run measured, {arch} at {pilots:,} pilots, {tasks:,} tasks and "
        f"{sites} sites, took {seconds:.0f} s; the model, checked against the simulator above, "
        "answers the instances' question at the pool's size"
    )


INSTANCES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)


def gridscale_jobs(quick: bool, seed: int) -> list[Job]:
    return [
        Job(
            {"architecture": arch, "pilots": pilots, "tasks": tasks, "seed": seed},
            VALIDATION.replace(architecture=arch, pilots=pilots, tasks=tasks, seed=seed),
        )
        for pilots, tasks in _validation_sizes(quick)
        for arch in ARCHITECTURES
    ]


def _row(cost_name: str, found: Estimate) -> dict[str, Any]:
    return {
        "cost": cost_name,
        "call_ms": found.call_cost * 1000,
        "architecture": found.architecture,
        "instances": found.instances,
        "calls_per_s": found.calls_per_s,
        "utilization": found.utilization,
        "idle_utilization": found.idle_utilization,
        "requests_per_task": found.requests_per_task,
        "delay_median": _finite(found.delay_median),
        "first_burst": _finite(found.first_burst),
        "meets": "yes" if found.meets else "no",
    }


def _finite(value: float) -> float | None:
    return None if math.isinf(value) else value


def gridscale_report(
    results: list[tuple[Job, SimResult]], out: Path, costs: CostModel
) -> list[str]:
    notes: list[str] = []
    # 1. The model against the event simulator at a size both run.
    write_csv(out / "runs.csv", rows_of(results))
    checks = validation_rows(results, costs)
    write_csv(out / "validation.csv", checks)
    notes += validation_notes(checks)
    notes.append(simulator_at_pool_size())
    # 2. The model at the pool's size.
    grid = [
        _row(name, estimate(POOL.with_cost(cost), arch, k, costs))
        for name, cost in CALL_COSTS.items()
        for arch in ARCHITECTURES
        for k in INSTANCES
    ]
    write_csv(out / "grid.csv", grid)
    needed: list[dict[str, Any]] = []
    for name, cost in CALL_COSTS.items():
        for arch in ARCHITECTURES:
            found = instances_needed(POOL.with_cost(cost), arch, costs)
            if found is None:
                needed.append({"cost": name, "architecture": arch, "instances": None})
                notes.append(
                    f"{arch} at {name}: no number of instances meets the targets "
                    f"(first burst < {FIRST_BURST_TARGET:g} s, median delay < {DELAY_TARGET:g} s): "
                    "missed"
                )
                continue
            needed.append(_row(name, found))
            notes.append(
                f"{arch} at {name}: targets (first burst < {FIRST_BURST_TARGET:g} s, median "
                f"delay < {DELAY_TARGET:g} s) met with {found.instances} instance(s) "
                f"(first burst {found.first_burst:.1f} s, median delay "
                f"{found.delay_median:.2f} s, {found.calls_per_s:,.0f} calls/s, "
                f"{found.requests_per_task:.2f} calls per task)"
            )
    write_csv(out / "needed.csv", needed)
    for arch in ARCHITECTURES:  # SQLite: one instance, no more (it cannot be shared)
        alone = estimate(POOL.with_cost(1 / SQLITE_MEASURED), arch, 1, costs)
        notes.append(
            f"{arch} on one SQLite instance ({SQLITE_MEASURED:.0f} calls/s): first burst "
            f"{_show(alone.first_burst)} ({_met(alone.first_burst, FIRST_BURST_TARGET)}), "
            f"median delay {_show(alone.delay_median)} "
            f"({_met(alone.delay_median, DELAY_TARGET)})"
        )
    _figures(out, needed, grid)
    return notes


def _met(value: float, target: float) -> str:
    """A target against its value: met or missed, with the target."""
    return f"target < {target:g} s {'met' if value < target else 'missed'}"


def _show(value: float) -> str:
    return "never (saturated)" if math.isinf(value) else f"{value:.2f} s"


def _figures(out: Path, needed: Sequence[dict[str, Any]], grid: Sequence[dict[str, Any]]) -> None:
    by = {(r["cost"], r["architecture"]): r.get("instances") for r in needed}
    bars(
        out / "gridscale_instances.png",
        f"TQ instances for first burst < 60 s, median delay < 1 s ({POOL.pilots:,} pilots)",
        "instances (model)",
        list(ARCHITECTURES),
        {
            name: ([by.get((name, arch)) for arch in ARCHITECTURES], [0.0] * len(ARCHITECTURES))
            for name in CALL_COSTS
        },
        log=True,
        values=True,
    )
    plt = _pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(7.5, 6.4), sharex=True)
    panels = (
        (axes[0], "first_burst", "first burst (s)", FIRST_BURST_TARGET),
        (axes[1], "delay_median", "median inter-task delay (s)", DELAY_TARGET),
    )
    # A colour per per-call cost, a line style and marker per architecture: pre-DHT's and
    # centralized's curves coincide at every cost, so a colour each would hide one under the other.
    styles = {"pre-dht": ("-", "o"), "centralized": (":", "x"), "distributed": ("--", ".")}
    colors = {name: f"C{index}" for index, name in enumerate(CALL_COSTS)}
    goals = {
        "first_burst": "target: first burst < {:g} s",
        "delay_median": "target: median delay < {:g} s",
    }
    for ax, metric, label, target in panels:
        for name in CALL_COSTS:
            for arch in ARCHITECTURES:
                points = [
                    (r["instances"], r[metric])
                    for r in grid
                    if r["cost"] == name and r["architecture"] == arch and r[metric] is not None
                ]
                if points:
                    xs, ys = zip(*points, strict=True)
                    style, marker = styles[arch]
                    ax.plot(
                        xs,
                        ys,
                        linestyle=style,
                        marker=marker,
                        markersize=4,
                        color=colors[name],
                        label=f"{arch}, {name}",
                    )
        ax.axhline(
            target,
            color="black",
            linewidth=1,
            linestyle="--",
            label=goals[metric].format(target),
        )
        ax.annotate(
            goals[metric].format(target),
            (0.01, target),
            xycoords=("axes fraction", "data"),
            xytext=(0, 2),
            textcoords="offset points",
            fontsize=7,
        )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_ylabel(label, fontsize=8)
        legend_outside(ax, fontsize=6)
    axes[1].set_xlabel("Task Queue instances")
    axes[0].set_title("The model at the CMS global pool's size, by per-call cost", fontsize=10)
    fig.tight_layout()
    save(fig, out / "gridscale_curves.png")
