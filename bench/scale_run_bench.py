"""The distributed architecture (Delgado Peris 2014) with real pilot processes, and the simulator at
the same size beside it.

    .venv/bin/python bench/scale_run_bench.py [--quick] [--pilots 500] [--processes 20]
        [--workflows w1,w2,w3] [--scale 5] [--sleep 5] [--master-timeout 30]

A Task Queue (``tq serve --architecture distributed``) and one site of ``--pilots`` real pilots
over ``--processes`` processes (``pilot run --pilots N``; the master alone in the first), each
task a real subprocess writing real files, run each workflow; the Task Queue's counters (as
``tq status --json`` shows them) give one row per workflow.  Then ``glidein_ext.sim`` runs the
same site (pilots, tasks, round period, master timeout, heartbeats; loopback latencies; the
tasks as long as the real ones took at their pilots, mean and spread, from the counters'
``task_time``) with this machine's calibration, and the table shows both and whether they agree:

  requests per task     within 25% (relative)
  inter-task delay p50  within 1 s, or within 50%
  cache hit, local hit  within 0.10 (absolute)
  turnaround            within 25% (relative)

``--quick``: 60 pilots in 3 processes, W1 at scale 1 (160 tasks of 1 s).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import tempfile
import time
from pathlib import Path
from typing import Any

# (metric, name, relative tolerance, absolute tolerance): agree if within either
MARGINS = (
    ("requests_per_task", "req/task", 0.25, 0.0),
    ("delay_median", "delay p50", 0.5, 1.0),
    ("cache_hit", "cache hit", 0.0, 0.10),
    ("local_hit", "local hit", 0.0, 0.10),
    ("turnaround", "turnaround", 0.25, 0.0),
)


def agree(real: float | None, sim: float | None, rel: float, absolute: float) -> bool:
    if real is None or sim is None:
        return real is None and sim is None
    return abs(real - sim) <= max(rel * abs(real), absolute)


def simulated(
    pilots: int, kind: str, tasks: int, task_time: tuple[float, float], master_timeout: float
) -> dict[str, Any]:
    """The simulator at the real run's size, its tasks as long as the real ones were (mean and
    standard deviation: a wave's completions spread as the real ones did, which decides how
    many rounds it makes)."""
    from glidein_ext.sim.calibration import calibrate
    from glidein_ext.sim.config import Network, SimConfig, Storage, TqCosts
    from glidein_ext.sim.engine import simulate

    config = SimConfig(
        architecture="distributed",
        workflow=kind,
        tasks=tasks,
        pilots=pilots,
        sites=1,
        runtime_mean=task_time[0],
        runtime_sd=task_time[1],
        file_size=100,
        round_period=1.0,
        master_timeout=master_timeout,
        heartbeat_interval=60.0,
        network=Network(tq_latency=0.0005, lan_latency=0.0005),
        costs=TqCosts(),
        storage=Storage(0.0, 0.0),  # the bench's SE: a directory, no added delay
    )
    return simulate(config, calibrate()).summary


def measured(row: Any) -> dict[str, Any]:
    """A real run's row: its tasks and the metrics the table compares, in the simulator's
    summary's names, and its requests by kind."""
    values = {name: getattr(row, name) for name in ("tasks", *(m for m, _, _, _ in MARGINS))}
    values["requests_by_kind"] = dict(row.kinds)
    return values


def task_time(counters: dict[str, Any], sleep: float) -> tuple[float, float]:
    """The real tasks' time at their pilots (mean, sd); without one, the sleep plus the
    subprocess start and the files (0.05 s) and a small spread."""
    measured_time = counters.get("task_time") or {}
    if measured_time.get("mean") is None:
        return sleep + 0.05, 0.02
    return float(measured_time["mean"]), float(measured_time["sd"])


def _phases(site: Any) -> dict[str, float]:
    """The master's round phases so far (seconds, summed over the site's masters' rounds)."""
    counters = site.operator.call("GET", "/api/v1/counters")
    found: dict[str, float] = {}
    for spent in (counters.get("phases") or {}).values():
        for phase, seconds in spent.items():
            found[phase] = found.get(phase, 0.0) + float(seconds)
    return found


def _timeline(database: str, workflow_id: int) -> list[str]:
    """Per step of a real run: when its tasks became runnable and when they ended, in seconds
    since the submission (min/median/max), from the Task Queue's database: where a workflow's
    turnaround goes."""
    import sqlite3
    import statistics

    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        (submitted,) = db.execute(
            "SELECT submitted_at FROM workflows WHERE id = ?", (workflow_id,)
        ).fetchone()
        rows = db.execute(
            "SELECT step, runnable_since, finished_at FROM tasks WHERE workflow_id = ?",
            (workflow_id,),
        ).fetchall()
    lines = []
    for step in sorted({r[0] for r in rows}):
        spans = []
        for index in (1, 2):
            values = sorted(r[index] - submitted for r in rows if r[0] == step and r[index])
            spans.append(
                f"{values[0]:.1f}/{statistics.median(values):.1f}/{values[-1]:.1f}"
                if values
                else "-"
            )
        count = sum(1 for r in rows if r[0] == step)
        lines.append(f"step {step}: {count} tasks, runnable {spans[0]} s, ended {spans[1]} s")
    return lines


def _fmt(value: float | None) -> str:
    return (
        "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60 pilots, 3 processes, W1 x 1")
    parser.add_argument("--pilots", type=int, default=500)
    parser.add_argument("--processes", type=int, default=20)
    parser.add_argument("--workflows", default="w1,w2,w3")
    parser.add_argument("--scale", type=float, default=5.0, help="W1 at 5: 400 + 400 tasks")
    parser.add_argument("--sleep", type=float, default=5.0, help="seconds each task runs")
    # 500 pilots on 2 cores hold event loops up for seconds: a short master timeout makes the
    # Task Queue hand the role on again and again (each takeover loses completions in flight).
    parser.add_argument("--master-timeout", type=int, default=30)
    args = parser.parse_args()
    if args.quick:
        args.pilots, args.processes, args.workflows, args.scale, args.sleep = 60, 3, "w1", 1, 1
    from glidein_ext.testbed.site_runs import SiteRun, row

    kinds = [k.strip() for k in args.workflows.split(",") if k.strip()]
    started = time.monotonic()
    real: dict[str, dict[str, Any]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="scale-run-") as tmp,
        SiteRun(
            Path(tmp) / "site",
            "distributed",
            args.pilots,
            processes=args.processes,
            first_alone=True,
            pilot_args=["--round-period", "1"],
            tq_args=["--master-timeout", str(args.master_timeout)],
            register_timeout=600.0,
        ) as site,
    ):
        registered = time.monotonic() - started
        for kind in kinds:
            before = _phases(site)
            counters = site.run_workflow(kind, args.scale, sleep=args.sleep, timeout=1800)
            real[kind] = measured(row("distributed", counters))
            real[kind]["task_time"] = task_time(counters, args.sleep)
            real[kind]["phases"] = {p: s - before.get(p, 0.0) for p, s in _phases(site).items()}
            assert site.server is not None
            real[kind]["timeline"] = _timeline(site.server.database, counters["id"])
    sims = {
        kind: simulated(
            args.pilots, kind, real[kind]["tasks"], real[kind]["task_time"], args.master_timeout
        )
        for kind in kinds
    }
    print(
        f"distributed site: {args.pilots} real pilots in {args.processes} processes "
        f"(registered in {registered:.0f} s), tasks of {args.sleep} s; simulator beside"
    )
    head = f"{'wf':<3} {'tasks':>5} {'run':<4}" + "".join(f" {n:>10}" for _, n, _, _ in MARGINS)
    print(head)
    verdicts = []
    for kind in kinds:
        for label, values in (("real", real[kind]), ("sim", sims[kind])):
            cells = "".join(f" {_fmt(values[m]):>10}" for m, _, _, _ in MARGINS)
            print(f"{kind:<3} {real[kind]['tasks']:>5} {label:<4}{cells}")
        marks = []
        for metric, _, rel, absolute in MARGINS:
            ok = agree(real[kind][metric], sims[kind][metric], rel, absolute)
            verdicts.append(ok)
            marks.append("yes" if ok else "NO")
        print(f"{kind:<3} {'':>5} {'agree':<4}" + "".join(f" {m:>10}" for m in marks))
        for label, values in (("real", real[kind]), ("sim", sims[kind])):
            by_kind = sorted(values["requests_by_kind"].items())
            print(f"    {label} requests: " + ", ".join(f"{k} {n}" for k, n in by_kind))
        mean, sd = real[kind]["task_time"]
        print(f"    task time (real, given to the simulator): mean {mean:.2f} s, sd {sd:.2f} s")
        spent = real[kind]["phases"]
        print("    real master, seconds: " + ", ".join(f"{p} {s:.2f}" for p, s in spent.items()))
        for line in real[kind]["timeline"]:
            print(f"    real {line} (min/median/max since the submission)")
    print(
        "margins: req/task and turnaround 25%, delay p50 1 s or 50%, hit ratios 0.10; "
        f"{sum(verdicts)}/{len(verdicts)} agree ({time.monotonic() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
