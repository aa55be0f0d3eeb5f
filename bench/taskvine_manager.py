"""The TaskVine side of bench/taskvine_bench.py: a TaskVine manager (Sly-Delgado et al. 2023) that
runs one workload and writes what it measured as JSON.  It runs inside the TaskVine chroot with the
chroot's python3 (Debian trixie's ``ndcctools.taskvine``), never with the project's: it imports
nothing of glidein_ext.

    python3 taskvine_manager.py DIR trivial N WORKERS
    python3 taskvine_manager.py DIR data PRODUCERS MERGES FAN_IN MIB WORKERS

It binds a free port on 127.0.0.1 and writes it to ``DIR/port``, waits until WORKERS workers are
connected, then submits the workload and waits for every task; ``DIR/result.json`` gets the tasks
done and failed, the seconds from the first submit to the last task done, this process's CPU
seconds over that span (the manager is this process: the library runs in it) and the manager's
bytes sent to and received from workers (its ``stats``).

trivial: N tasks ``/bin/true``.  data: PRODUCERS tasks each write MIB MiB into a temp file
(``declare_temp``: it stays at the worker that produced it and moves worker to worker), then
MERGES tasks each read FAN_IN of them (merge i reads producers i*FAN_IN .. i*FAN_IN+FAN_IN-1,
wrapping round) and write their size to a buffer returned to the manager.
"""

from __future__ import annotations

import json
import resource
import sys
import time
import warnings
from pathlib import Path
from typing import Any

warnings.simplefilter("ignore")  # DaskVine not available: not used here
import ndcctools.taskvine as vine  # noqa: E402

CONNECT_TIMEOUT = 120.0


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def wait_for_workers(manager: Any, count: int) -> None:
    deadline = time.monotonic() + CONNECT_TIMEOUT
    while manager.stats.workers_connected < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {manager.stats.workers_connected} of {count} workers connected")
        manager.wait(1)


def drain(manager: Any) -> tuple[int, int]:
    done = failed = 0
    while not manager.empty():
        task = manager.wait(5)
        if task is None:
            continue
        if task.successful():
            done += 1
        else:
            failed += 1
    return done, failed


def submit_trivial(manager: Any, tasks: int) -> None:
    for _ in range(tasks):
        task = vine.Task("/bin/true")
        task.set_cores(1)
        manager.submit(task)


def submit_data(manager: Any, producers: int, merges: int, fan_in: int, mib: int) -> None:
    temps = [manager.declare_temp() for _ in range(producers)]
    for temp in temps:
        task = vine.Task(f"head -c {mib * 2**20} /dev/urandom > out")
        task.set_cores(1)
        task.add_output(temp, "out")
        manager.submit(task)
    for i in range(merges):
        names = [f"in{k}" for k in range(fan_in)]
        task = vine.Task(f"cat {' '.join(names)} | wc -c > total")
        task.set_cores(1)
        for k, name in enumerate(names):
            task.add_input(temps[(i * fan_in + k) % producers], name)
        task.add_output(manager.declare_buffer(), "total")
        manager.submit(task)


def main() -> None:
    directory = Path(sys.argv[1])
    kind = sys.argv[2]
    numbers = [int(arg) for arg in sys.argv[3:]]
    manager = vine.Manager(port=0, run_info_path=str(directory / "vine-run-info"))
    manager.enable_peer_transfers()
    (directory / "port").write_text(str(manager.port))
    workers = numbers[-1]
    wait_for_workers(manager, workers)
    (directory / "connected").write_text("yes")  # the bench stops replacing workers that exit
    cpu_start = cpu_seconds()
    start = time.monotonic()
    if kind == "trivial":
        submit_trivial(manager, numbers[0])
    else:
        submit_data(manager, *numbers[:4])
    done, failed = drain(manager)
    elapsed = time.monotonic() - start
    cpu = cpu_seconds() - cpu_start
    stats = manager.stats
    result = {
        "done": done,
        "failed": failed,
        "seconds": elapsed,
        "cpu": cpu,
        "bytes_sent": stats.bytes_sent,
        "bytes_received": stats.bytes_received,
        "workers": stats.workers_connected,
    }
    (directory / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
