"""TaskVine (Sly-Delgado et al. 2023) and glidein-ext side by side on this machine, in one run.

    .venv/bin/python bench/taskvine_bench.py [--quick] [--tasks 2000] [--workers 8]
        [--producers 40] [--fan-in 4] [--mib 10] [--architectures pre-dht,centralized,distributed]
        [--pilot-processes P] [--pull] [--one-report-per-request] [--repeat 3]

Must run as root: TaskVine comes from Debian trixie's packages (coop-computing-tools 7.14.5,
python3-workqueue's ``ndcctools.taskvine``, python3-cloudpickle) in a chroot of its own, which
``scripts/taskvine-chroot build`` makes the first time (a copy of the HTCondor sandbox's chroot,
or a debootstrap; cached) and ``mount`` readies (/proc, /dev; unmounted at the end).  The
manager (bench/taskvine_manager.py with the chroot's python3) and the workers (``vine_worker
--cores 1``) run in it and talk over 127.0.0.1 (the chroot shares the network namespace).
Without root, or when the setup fails, the TaskVine lines are left out and the output says why.

Workloads, both systems, ``--workers`` single-core workers:
  trivial  ``--tasks`` tasks of ``/bin/true``: tasks per second from the first submit to the last
           task done, and the central service's CPU per task (TaskVine: the manager process, the
           library runs in it; ours: the ``tq serve`` process, from /proc).  ``--repeat`` rounds,
           each system once a round; a line is the median of its runs (the range in its note).
  data     ``--producers`` tasks each write a ``--mib`` MiB intermediate file, then producers /
           fan-in merges each read ``--fan-in`` of them: the turnaround, and the bytes moved worker
           to worker and through the centre.  TaskVine: temp files (``declare_temp``) with peer
           transfers on; the centre is the manager (its transaction log).  Ours: the merges'
           inputs come from another pilot's cache over HTTP at centralized and distributed sites
           (the site DHT says who has them: docs/architectures.md), from the SE at a pre-DHT
           site, and every output is also staged out to the SE (a directory here): the centre
           column counts those copies and the SE reads.  Then again without an SE at
           centralized and distributed sites ("no-SE": outputs stay in the pilots' caches, as
           TaskVine's temp files stay at the workers; a pilot without an SE stages nothing out).
Ours: one ``tq serve --architecture A`` and one ``glidein-ext pilot run --pilots N`` (each pilot
its own simulated host, so no hard links; ``--pilot-processes P`` spreads the N pilots over P
such processes, by default one per core, at most one per worker: on two cores one process of
eight pilots made 310-394 trivial tasks/s, two processes of four 401-498), a fresh pair per
architecture and workload, its files removed after it.
Idle pilots leave a standing offer (``--offer-wait 30``) and the Task Queue pushes every task to
such offers (``courier_priority`` 0: Lee 2003's courier, as TaskVine's manager sends tasks to
its connected workers); ``--pull``: they only pull, every 0.5 s (at most 1 s) while idle, the
service's default.  At a distributed site the master runs in that
pilot process and its CPU is not in the column (the Task Queue's is).
The pilots of a process send their reports that are ready at once in one request
(``--batch-reports``: the Task Queue serves each as alone, and commits them together);
``--one-report-per-request``: each its own.

Each of our lines says whether the goal "ahead of TaskVine" is met: more tasks/s and less central
CPU per task (trivial), a shorter turnaround and no more bytes through the centre (data).  A
trivial line of ours also says how many calls the Task Queue answered per task, by kind (a busy
pulling pilot makes one, ``complete-and-request``).
``--quick``: 500 tasks, 10 producers, one round.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from glidein_ext.testbed.vine_compare import (
    MIB,
    OURS,
    TASKVINE,
    Line,
    data_workflow,
    median_line,
    ours_moved,
    table,
    taskvine_moved,
    trivial_workflow,
)

ROOT = Path(__file__).resolve().parent.parent
SETUP = ROOT / "scripts" / "taskvine-chroot"
CHROOT = Path(
    os.environ.get("GLIDEIN_EXT_TASKVINE_CHROOT", "/var/cache/glidein-ext/taskvine-trixie")
)
MANAGER = Path(__file__).resolve().parent / "taskvine_manager.py"
ARCHITECTURES = ("pre-dht", "centralized", "distributed")
RUN_TIMEOUT = 600.0
# Push (the default): an idle pilot's request stands up to this many seconds, and the Task Queue
# pushes every task, whatever its priority (courier_priority 0), to such standing offers at once
# (Lee 2003 4.2.3's courier), as TaskVine's manager sends tasks to its connected workers; the
# task is still the matcher's choice for the pilot.  ``--pull``: pilots only pull, every 0.5 s
# at most 1 s while idle (the service's default, courier_priority 100).
PUSH_OFFER_WAIT = 30


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of the process so far (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- TaskVine ---


def taskvine_ready() -> str | None:
    """Build the chroot if needed; None when ready, else why not."""
    if os.geteuid() != 0:
        return "needs root (chroot, mount)"
    started = time.monotonic()
    proc = subprocess.run([str(SETUP), "build"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return "setup failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1]
    took = time.monotonic() - started
    if took > 30:
        print(f"(TaskVine chroot built in {took:.0f} s)", flush=True)
    return None


def _in_chroot(*command: str) -> list[str]:
    clean = ["env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"]
    return [*clean, "chroot", str(CHROOT), *command]


@contextlib.contextmanager
def _mounted() -> Iterator[None]:
    subprocess.run([str(SETUP), "mount"], check=True)
    try:
        yield
    finally:
        subprocess.run([str(SETUP), "umount"], check=False)


def _stop(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_taskvine(workload: str, numbers: Sequence[int], workers: int) -> dict[str, Any]:
    """One TaskVine run (bench/taskvine_manager.py): its result, with the bytes it moved."""
    with (
        _mounted(),
        tempfile.TemporaryDirectory(prefix="taskvine-bench-", dir=CHROOT / "tmp") as tmp,
    ):
        inside = "/tmp/" + Path(tmp).name
        shutil.copy(MANAGER, Path(tmp) / MANAGER.name)
        args = [workload, *map(str, numbers), str(workers)]
        log = open(Path(tmp) / "manager.log", "wb")  # noqa: SIM115 (closed below)
        manager = subprocess.Popen(
            _in_chroot("python3", f"{inside}/{MANAGER.name}", inside, *args),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        procs = [manager]
        try:
            port_file = Path(tmp) / "port"
            deadline = time.monotonic() + 60
            while not port_file.exists() or not port_file.read_text().strip():
                if manager.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(_tail(Path(tmp) / "manager.log"))
                time.sleep(0.1)
            port = port_file.read_text().strip()

            def worker(name: str) -> subprocess.Popen[bytes]:
                return subprocess.Popen(
                    _in_chroot(
                        "vine_worker",
                        *("--cores", "1", "--memory", "1024", "--disk", "4096"),
                        *("--single-shot", "--timeout", "120", "--workspace", f"{inside}/{name}"),
                        *("127.0.0.1", port),
                    ),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    stdin=subprocess.DEVNULL,
                )

            workers_at = {i: worker(f"w{i}") for i in range(workers)}
            procs.extend(workers_at.values())
            # a worker that exits before all have connected (seen on a loaded machine) is
            # started again, a few times, so that both systems always run with the same count
            restarts = 0
            connected = Path(tmp) / "connected"
            run_deadline = time.monotonic() + RUN_TIMEOUT
            while manager.poll() is None and not connected.exists():
                if time.monotonic() > run_deadline:
                    break
                for i, proc in list(workers_at.items()):
                    if proc.poll() is not None and restarts < 3 * workers:
                        restarts += 1
                        workers_at[i] = worker(f"w{i}-{restarts}")
                        procs.append(workers_at[i])
                time.sleep(0.2)
            manager.wait(timeout=max(1.0, run_deadline - time.monotonic()))
            result_file = Path(tmp) / "result.json"
            if not result_file.exists():
                raise RuntimeError(_tail(Path(tmp) / "manager.log"))
            result: dict[str, Any] = json.loads(result_file.read_text())
        finally:
            _stop(procs)
        logs = sorted(Path(tmp).glob("vine-run-info/*/vine-logs/transactions"))
        lines = logs[-1].read_text().splitlines() if logs else []
        result["moved"] = taskvine_moved(lines)
        return result


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-1500:]
    except OSError as exc:
        return str(exc)


def taskvine_line(workload: str, numbers: Sequence[int], workers: int) -> Line:
    result = run_taskvine(workload, numbers, workers)
    return Line(
        TASKVINE,
        "manager",
        workload,
        int(result["done"]),
        int(result["failed"]),
        float(result["seconds"]),
        float(result["cpu"]),
        result["moved"] if workload == "data" else None,
    )


# --- glidein-ext ---


def _unfinished(database: str, workflow_id: int) -> tuple[int, int, float | None]:
    """(tasks not ended, tasks failed, the last finish time) of a workflow, read from the Task
    Queue's SQLite file (no call to the service: its CPU counts only the pilots' work)."""
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        (left,) = db.execute(
            "SELECT count(*) FROM tasks WHERE workflow_id = ? AND state NOT IN ('done', 'failed')",
            (workflow_id,),
        ).fetchone()
        (failed,) = db.execute(
            "SELECT count(*) FROM tasks WHERE workflow_id = ? AND state = 'failed'", (workflow_id,)
        ).fetchone()
        (last,) = db.execute(
            "SELECT max(finished_at) FROM tasks WHERE workflow_id = ?", (workflow_id,)
        ).fetchone()
    return int(left), int(failed), last


def ours_line(
    architecture: str,
    workload: str,
    workflow: dict[str, Any],
    workers: int,
    with_se: bool = True,
    processes: int = 1,
    push: bool = True,
    batch: bool = True,
) -> tuple[Line, dict[str, Any]]:
    """One run of ours: its line and the workflow's counters.  Its files are removed right after
    it, as TaskVine's run directory is: left in place, the kernel writes them back to disk
    during the runs that follow (measured: a no-SE data run after two others, 3.4-4.0 s; with
    each run's files removed, 2.4-2.6 s).  ``push``: idle pilots leave standing offers and the
    Task Queue pushes every task to them (``PUSH_OFFER_WAIT``); ``batch``: a process's pilots
    send the reports ready at once together (``pilot run --batch-reports``)."""
    from glidein_ext.testbed.site_runs import SiteRun

    pilot_args = ["--poll", "0.5", "--poll-max", "1", "--cache-max-space", "2G"]
    if push:
        pilot_args += ["--offer-wait", str(PUSH_OFFER_WAIT)]
    if batch:
        pilot_args.append("--batch-reports")

    with (
        tempfile.TemporaryDirectory(prefix=f"taskvine-bench-{architecture}-") as tmp,
        SiteRun(
            Path(tmp),
            architecture,
            workers,
            processes=processes,
            pilot_args=pilot_args,
            tq_settings={"courier_priority": "0"} if push else {},
            with_se=with_se,
            verbose=False,  # as TaskVine's workers, no line per task (warnings still)
        ) as site,
    ):
        assert site.server is not None and site.server.process is not None
        pid, database = site.server.process.pid, site.server.database
        cpu_before = process_cpu(pid)
        started = time.time()
        workflow_id = site.operator.submit(workflow).workflow_id
        deadline = time.monotonic() + RUN_TIMEOUT
        while True:
            left, failed, last = _unfinished(database, workflow_id)
            if left == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{architecture} {workload}: {left} tasks left\n{site.logs()}")
            time.sleep(0.05)
        cpu = process_cpu(pid) - cpu_before
        counters = site.workflow_counters(workflow_id)
    tasks = len(workflow["tasks"])
    seconds = (last or time.time()) - started
    return Line(OURS, architecture, workload, tasks - failed, failed, seconds, cpu), counters


def _calls(counters: dict[str, Any]) -> str:
    """The pilots' (or the master's) calls to the Task Queue per task, by kind."""
    tasks = counters.get("tasks") or 0
    requests = counters.get("requests") or {}
    if not tasks or not requests:
        return ""
    kinds = " ".join(f"{kind}={n}" for kind, n in sorted(requests.items()))
    return f"{sum(requests.values()) / tasks:.2f} calls/task: {kinds}"


def _trivial_lines(
    args: argparse.Namespace, architectures: Sequence[str], taskvine: bool
) -> list[Line]:
    """The trivial runs in ``args.repeat`` rounds, each system once a round (the machine's
    state drifts between runs: one run each flipped the CPU verdict between runs of the same
    tree); each line is the median of its runs' tasks/s and of their CPU per task."""
    trivial: dict[tuple[str, str], list[Line]] = {}
    notes: dict[str, str] = {}
    for _ in range(args.repeat):
        if taskvine:
            line = taskvine_line("trivial", (args.tasks,), args.workers)
            trivial.setdefault((line.system, line.architecture), []).append(line)
        for arch in architectures:
            line, counters = ours_line(
                arch,
                "trivial",
                trivial_workflow("trivial", args.tasks),
                args.workers,
                processes=args.pilot_processes,
                push=not args.pull,
                batch=not args.one_report_per_request,
            )
            trivial.setdefault((line.system, line.architecture), []).append(line)
            notes[arch] = _calls(counters)
    return [
        median_line(runs, notes.get(arch, "") if system == OURS else "")
        for (system, arch), runs in trivial.items()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="500 tasks, 10 producers")
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--producers", type=int, default=40)
    parser.add_argument("--fan-in", type=int, default=4)
    parser.add_argument("--mib", type=int, default=10)
    parser.add_argument("--architectures", default=",".join(ARCHITECTURES))
    parser.add_argument(
        "--repeat", type=int, default=3, help="rounds of the trivial runs (medians; --quick: 1)"
    )
    parser.add_argument(
        "--pull", action="store_true", help="our pilots only pull (no standing offers, no push)"
    )
    parser.add_argument(
        "--one-report-per-request",
        action="store_true",
        help="our pilots send each report alone (not --batch-reports)",
    )
    parser.add_argument(
        "--pilot-processes",
        type=int,
        default=None,
        help="the `pilot run` processes our workers are spread over (1: one `--pilots N`; "
        "default: one per core, at most one per worker)",
    )
    args = parser.parse_args()
    if args.quick:
        args.tasks, args.producers, args.repeat = 500, 10, 1
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.pilot_processes is None:
        args.pilot_processes = max(1, min(args.workers, os.cpu_count() or 1))
    if not 1 <= args.pilot_processes <= args.workers:
        parser.error(f"--pilot-processes must be 1 to --workers ({args.workers})")
    architectures = [a for a in args.architectures.split(",") if a]
    for arch in architectures:
        if arch not in ARCHITECTURES:
            parser.error(f"unknown architecture {arch!r} (one of {', '.join(ARCHITECTURES)})")
    merges = math.ceil(args.producers / args.fan_in)
    data_numbers = (args.producers, merges, args.fan_in, args.mib)

    started = time.monotonic()
    lines: list[Line] = []
    missing = taskvine_ready()
    lines.extend(_trivial_lines(args, architectures, taskvine=missing is None))
    if missing is None:
        lines.append(taskvine_line("data", data_numbers, args.workers))
    data_runs = [(arch, True) for arch in architectures]
    data_runs += [(arch, False) for arch in architectures if arch != "pre-dht"]
    for arch, with_se in data_runs:
        line, counters = ours_line(
            arch,
            "data",
            data_workflow("data", *data_numbers),
            args.workers,
            with_se,
            args.pilot_processes,
            push=not args.pull,
            batch=not args.one_report_per_request,
        )
        origins = counters.get("inputs") or {}
        stage_outs = args.producers if with_se else 0
        moved = ours_moved(origins, stage_outs, args.mib * MIB, 0)
        note = "inputs " + " ".join(f"{k}={v}" for k, v in sorted(origins.items()) if v)
        note += "; every output also to the SE" if with_se else "; no SE"
        lines.append(
            Line(
                line.system,
                arch if with_se else f"{arch} no-SE",
                "data",
                line.tasks,
                line.failed,
                line.seconds,
                line.cpu,
                moved,
                note,
            )
        )
    how = "only pull" if args.pull else "take every task pushed to their standing offers"
    how += (
        "; each report alone"
        if args.one_report_per_request
        else "; reports ready at once sent together"
    )
    print(
        f"{args.workers} single-core workers; trivial: {args.tasks} tasks of /bin/true; data: "
        f"{args.producers} producers of {args.mib} MiB, {merges} merges reading {args.fan_in} "
        f"each; our pilots in {args.pilot_processes} `pilot run` process(es); idle pilots {how}"
    )
    if missing is not None:
        print(f"TaskVine not run: {missing}")
    print(table(lines))
    with open("/proc/loadavg") as handle:
        load = handle.read().split()[:3]
    print(f"({time.monotonic() - started:.0f} s; load average {' '.join(load)})")


if __name__ == "__main__":
    main()
