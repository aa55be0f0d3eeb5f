"""How fast the event simulator (``glidein_ext.sim``) runs a large W1 workflow, beside the
aggregate model of the same run (``sim.gridscale``), one architecture after another.

    .venv/bin/python bench/sim_speed_bench.py [--quick] [--pilots 15000] [--tasks 100000]
    .venv/bin/python bench/sim_speed_bench.py --cms   # 150,000 pilots, 1,000,000 tasks

Each architecture runs once with ``grid-scale``'s settings (W1, no SE delays, one Task Queue
server of 3 ms a call, ``--reference-costs``); the distributed one over ``--pilots / 1,500``
sites (the CMS pool's workers per site).  Columns: the simulator's CPU seconds
(``time.process_time``: comparable on a shared machine) and wall seconds, then the simulated and
the modelled calls per task.  Target: at most 300 s of CPU a run (the 2-core machine), and
1,800 s at the CMS global pool's size (``--cms``: 100 sites, 150,000 pilots, 1,000,000 tasks;
the distributed architecture, the one that pool's size is simulated for: one pulling Task Queue
server is saturated there).  ``--quick``: 1,500 pilots and 5,000 tasks.
"""

from __future__ import annotations

import argparse
import os
import time

from glidein_ext.sim.calibration import REFERENCE
from glidein_ext.sim.config import SimConfig, Storage
from glidein_ext.sim.engine import simulate
from glidein_ext.sim.gridscale import Scale, estimate

TARGET_CPU_S = 300.0
CMS_TARGET_CPU_S = 1800.0
CMS_PILOTS, CMS_TASKS = 150_000, 1_000_000


def one(architecture: str, pilots: int, tasks: int) -> dict[str, float]:
    sites = max(2, pilots // 1500) if architecture == "distributed" else 2
    config = SimConfig(
        architecture=architecture,
        workflow="w1",
        pilots=pilots,
        tasks=tasks,
        sites=sites,
        storage=Storage(0.0, 0.0),
    )
    wall, cpu = time.perf_counter(), time.process_time()
    summary = simulate(config, REFERENCE).summary
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    model = estimate(Scale.from_config(config), architecture, 1, REFERENCE)
    return {
        "sites": sites,
        "cpu": cpu,
        "wall": wall,
        "calls": float(summary["requests_per_task"] or 0.0),
        "model": model.requests_per_task,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pilots", type=int, default=15_000)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--architectures", default="pre-dht,distributed")
    parser.add_argument("--cms", action="store_true", help="the CMS pool's size, distributed")
    args = parser.parse_args()
    pilots, tasks = (1500, 5000) if args.quick else (args.pilots, args.tasks)
    target = TARGET_CPU_S
    if args.cms:
        pilots, tasks, target = CMS_PILOTS, CMS_TASKS, CMS_TARGET_CPU_S
        args.architectures = "distributed"
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    print("| architecture | pilots | tasks | sites | CPU s | wall s | calls/task sim | model |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    verdicts = []
    for architecture in args.architectures.split(","):
        row = one(architecture, pilots, tasks)
        print(
            f"| {architecture} | {pilots:,} | {tasks:,} | {row['sites']:.0f} | {row['cpu']:.1f} "
            f"| {row['wall']:.1f} | {row['calls']:.3f} | {row['model']:.3f} |"
        )
        met = "target met" if row["cpu"] <= target else "target MISSED"
        verdicts.append(f"{architecture}: {row['cpu']:.0f} s of CPU (<= {target:.0f} s): {met}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    for line in verdicts:
        print(line)


if __name__ == "__main__":
    main()
