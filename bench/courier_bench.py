"""Courier push vs pull (Lee 2003 4.2.3): how soon an urgent task reaches an idle pilot.

    .venv/bin/python bench/courier_bench.py [--quick]

A real ``glidein-ext tq serve`` (SQLite, one instance) and idle pilots (threads over the real
client).  Urgent tasks (priority above ``courier_priority``) are submitted one at a time at
random moments; the latency is from the submit to the task reaching a pilot.  Same run, two ways:

- pull: each idle pilot asks, and on an empty answer waits ``--poll`` seconds before asking again
  (the agent's ``poll_interval``, its shortest wait; an agent idle for long waits up to
  ``poll_max``, 10 s, so real pull latencies are larger);
- courier: each idle pilot's request stands as an offer (``wait``) and the task is pushed to it.

Target: the courier's median latency is a small fraction of the pull's (under 0.25).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

OPERATOR, PILOT = "bench-op", "bench-pilot"
TARGET_RATIO = 0.25


def _run(url: str, mode: str, pilots: int, tasks: int, poll: float, seed: int) -> list[float]:
    """Latencies (s) of ``tasks`` urgent tasks reaching ``pilots`` idle pilots."""
    from glidein_ext.tq.client.client import TqClient
    from glidein_ext.tq.client.protocol import Completion, Registration

    stop = threading.Event()
    reached: dict[str, float] = {}
    lock = threading.Lock()

    def pilot(index: int) -> None:
        client = TqClient(url, PILOT, timeout=30)
        pilot_id = client.register(Registration(site="T0", host=f"{mode}-wn{index}")).pilot_id
        while not stop.is_set():
            task = client.request(pilot_id, wait=2.0 if mode == "courier" else 0.0)
            if task is None:
                if mode == "pull":
                    stop.wait(poll)
                continue
            with lock:
                reached[task.name] = time.monotonic()
            client.complete(pilot_id, Completion(task.task_id, task.attempt, 0))
        client.deregister(pilot_id)

    threads = [threading.Thread(target=pilot, args=(i,)) for i in range(pilots)]
    for thread in threads:
        thread.start()
    operator = TqClient(url, OPERATOR, timeout=30)
    rng = random.Random(seed)
    submitted: dict[str, float] = {}
    time.sleep(0.5)  # the pilots register and go idle
    for i in range(tasks):
        time.sleep(rng.uniform(0.2, poll * 1.2))  # any moment of the pilots' poll cycle
        name = f"{mode}-{i:03d}"
        submitted[name] = time.monotonic()
        operator.submit(
            {"name": name, "tasks": [{"name": name, "command": "true", "priority": 1000}]}
        )
        deadline = time.monotonic() + 30
        while name not in reached and time.monotonic() < deadline:
            time.sleep(0.002)
    stop.set()
    for thread in threads:
        thread.join(60)
    return [reached[n] - submitted[n] for n in submitted if n in reached]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few tasks (the tests run this)")
    parser.add_argument("--pilots", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--poll", type=float, default=1.0, help="the pull's wait (agent default)")
    args = parser.parse_args()
    tasks = 6 if args.quick else args.tasks
    pilots = 2 if args.quick else args.pilots
    from glidein_ext.testbed.tq_server import TqServer

    results: dict[str, list[float]] = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        TqServer(
            Path(tmp), operator_token=OPERATOR, pilot_token=PILOT, courier_priority="100"
        ) as server,
    ):
        for mode in ("pull", "courier"):
            results[mode] = _run(server.url, mode, pilots, tasks, args.poll, seed=7)
    print(f"urgent task -> idle pilot: {pilots} pilots, {tasks} tasks, pull wait {args.poll} s")
    print(f"{'mode':<8} {'reached':>7} {'median ms':>10} {'p90 ms':>8} {'max ms':>8}")
    for mode, lat in results.items():
        ms = sorted(1000 * x for x in lat)
        p90 = ms[min(len(ms) - 1, int(0.9 * len(ms)))] if ms else float("nan")
        median = statistics.median(ms) if ms else float("nan")
        print(f"{mode:<8} {len(ms):>7} {median:>10.1f} {p90:>8.1f} {max(ms, default=0):>8.1f}")
    pull, push = (statistics.median(results[m] or [float("nan")]) for m in ("pull", "courier"))
    ratio = push / pull if pull else float("nan")
    verdict = "met" if ratio < TARGET_RATIO else "MISSED"
    print(f"courier/pull median: {ratio:.3f} (target < {TARGET_RATIO}: {verdict})")
    if len(results["courier"]) < tasks or len(results["pull"]) < tasks:
        sys.exit("some urgent tasks never reached a pilot")


if __name__ == "__main__":
    main()
