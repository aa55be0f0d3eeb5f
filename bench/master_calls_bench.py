"""The distributed master's bulk calls at the Task Queue (Delgado Peris 2014 §III.B): a ``sync``
that carries a wave of completions, and an ``assign`` of a round's pairs.

    .venv/bin/python bench/master_calls_bench.py [--quick] [--sizes 100,400] [--runs 3]

A Task Queue store on a SQLite file (in this process, no HTTP: the calls' own cost), one site of N
workers and its master, W1 at 2N tasks (N step-0 tasks, each read by one step-1 task).  Per size
and run: the master's first ``sync`` (N offers), its ``assign`` of N pairs (each checked both
ways and taken), then a ``sync`` carrying the N completions (each recorded, its output's file
and site written, the step-1 task it feeds released) that also asks for the next N offers.

A round of the real master waits for both: at 400 pilots a wave's completions and pairs are the
largest part of a round's TQ time.  Targets: a completion carried in a ``sync`` costs at most what
a pilot's own completion call may (1 ms of CPU, ``bench/tq_bench.py``), a pair at most half that.
The median of the runs; ``--quick``: 50 and 100 workers, 2 runs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

COMPLETION_TARGET_MS = 1.0
PAIR_TARGET_MS = 0.5


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def one_run(workers: int, directory: Path) -> dict[str, float]:
    from glidein_ext.tq.client.protocol import (
        Completion,
        Pair,
        Registration,
        RoundReport,
        SiteAssign,
        SiteCompletion,
        SiteSync,
    )
    from glidein_ext.tq.models import Architecture
    from glidein_ext.tq.service.db import make_engine, migrate
    from glidein_ext.tq.service.store import Store
    from glidein_ext.tq.workflow import generate, parse_workflow

    clock = Clock()
    engine = make_engine(str(directory / "tq.sqlite"))
    try:
        migrate(engine)
        store = Store(
            engine, clock=clock, master_timeout=60, default_architecture=Architecture.DISTRIBUTED
        )
        store.load()
        answers = [
            store.register(
                Registration(site="S", host=f"wn{i}", dht_address=f"10.0.{i // 250}.{i % 250}:4000")
            )
            for i in range(workers + 1)
        ]
        master = answers[0].master
        assert master is not None
        ids = tuple(a.pilot_id for a in answers[1:])
        store.submit(parse_workflow(generate("w1", scale=workers * 2 / 160, sleep=5)))
        started = time.perf_counter()
        offers = store.sync("S", SiteSync(master.pilot_id, master.epoch, want=workers)).tasks
        first = time.perf_counter() - started
        pairs = tuple(Pair(o.task_id, p) for o, p in zip(offers, ids, strict=False))
        started = time.perf_counter()
        placed = store.assign(
            "S", SiteAssign(master.pilot_id, master.epoch, pairs, RoundReport(float(len(pairs))))
        ).accepted
        assigned = time.perf_counter() - started
        outputs = {o.task_id: o.outputs for o in offers}
        clock.now += 5
        done = tuple(
            SiteCompletion(
                p.pilot_id,
                Completion(
                    p.task_id, p.attempt, 0, outputs[p.task_id], "", clock.now - 5, clock.now
                ),
            )
            for p in placed
        )
        started = time.perf_counter()
        answer = store.sync("S", SiteSync(master.pilot_id, master.epoch, done, want=workers))
        synced = time.perf_counter() - started
        if not all(r.accepted for r in answer.results) or len(answer.tasks) < len(done):
            raise RuntimeError("the completions were not all accepted, or released too few tasks")
    finally:
        engine.dispose()
    return {
        "pairs": len(placed),
        "first_sync_s": first,
        "assign_s": assigned,
        "sync_s": synced,
        "pair_ms": 1000 * assigned / max(1, len(placed)),
        "completion_ms": 1000 * synced / max(1, len(done)),
    }


def verdict(ok: bool) -> str:
    return "target met" if ok else "target MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50 and 100 workers, 2 runs")
    parser.add_argument("--sizes", default="100,400", help="workers per site, comma-separated")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sizes = [50, 100] if args.quick else [int(s) for s in args.sizes.split(",") if s.strip()]
    runs = 2 if args.quick else args.runs
    print("The master's bulk calls at the Task Queue (SQLite, in process; medians)")
    print(
        f"{'workers':>7} {'first sync s':>12} {'assign s':>9} {'ms/pair':>8} "
        f"{'sync (done) s':>13} {'ms/completion':>13}  targets"
    )
    failed = False
    for workers in sizes:
        results: list[dict[str, Any]] = []
        for _ in range(runs):
            with tempfile.TemporaryDirectory(prefix="master-calls-") as tmp:
                results.append(one_run(workers, Path(tmp)))

        def med(key: str, results: list[dict[str, Any]] = results) -> float:
            return float(statistics.median(r[key] for r in results))

        pair_ok = med("pair_ms") <= PAIR_TARGET_MS
        done_ok = med("completion_ms") <= COMPLETION_TARGET_MS
        failed = failed or not (pair_ok and done_ok)
        print(
            f"{workers:>7} {med('first_sync_s'):>12.3f} {med('assign_s'):>9.3f} "
            f"{med('pair_ms'):>8.2f} {med('sync_s'):>13.3f} {med('completion_ms'):>13.2f}  "
            f"pair <= {PAIR_TARGET_MS} ms: {verdict(pair_ok)}; "
            f"completion <= {COMPLETION_TARGET_MS:.0f} ms: {verdict(done_ok)}"
        )
    if failed:
        print("(a target line says MISSED: see the module docstring)")


if __name__ == "__main__":
    main()
