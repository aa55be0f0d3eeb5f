"""The pure parts of bench/taskvine_bench.py: TaskVine's transaction log read for the bytes it
moved, the workloads as this project's workflows, the goal's verdict per line and the table.

TaskVine (Sly-Delgado et al. 2023) writes one transaction per event to
``vine-run-info/<run>/vine-logs/transactions``: ``CACHE_UPDATE`` when a file lands in a worker's
cache (a task's output where it ran, or a copy fetched from another worker: section 3.2, peer
transfers of temporary files), ``TRANSFER INPUT|OUTPUT`` when the manager sends a file to a
worker or gets one back (bytes through the centre).  The size field is in bytes (the log's
header calls it ``size_in_mb``; 7.14 writes bytes).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from glidein_ext.demos.table import Column, text_table

MIB = 2**20
TASKVINE = "TaskVine"
OURS = "glidein-ext"


@dataclass(frozen=True)
class Moved:
    """Bytes moved worker to worker, and between the workers and the centre."""

    peer: int
    centre: int


def taskvine_moved(transactions: Iterable[str], temp_prefix: str = "temp-") -> Moved:
    """What a TaskVine run moved, from its transaction log's lines: every ``CACHE_UPDATE`` of a
    temporary file after its first (the first is the producing task's output on its own worker,
    each later one a copy fetched from a peer) counts as peer bytes; every ``TRANSFER`` (to or
    from the manager) as bytes through the centre."""
    seen: Counter[str] = Counter()
    peer = centre = 0
    for line in transactions:
        fields = line.split()
        if len(fields) < 8 or fields[0].startswith("#") or fields[2] != "WORKER":
            continue
        event = fields[4]
        if event == "CACHE_UPDATE":
            name, size = fields[5], _int(fields[6])
            if name.startswith(temp_prefix):
                if seen[name]:
                    peer += size
                seen[name] += 1
        elif event == "TRANSFER" and len(fields) >= 9:
            centre += _int(fields[7])
    return Moved(peer, centre)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def ours_moved(inputs: dict[str, int], stage_outs: int, file_bytes: int, out_bytes: int) -> Moved:
    """What a glidein-ext run moved, from its workflow counters' input origins (``peer``: fetched
    from another pilot's cache over HTTP; ``host``: a hard link to a pilot's cache on the same
    host, no bytes moved; ``se``: read from the storage element) and the outputs it staged out:
    each of ``stage_outs`` intermediate files of ``file_bytes`` is copied to the SE, as are the
    final outputs (``out_bytes`` in all)."""
    peer = inputs.get("peer", 0) * file_bytes
    centre = inputs.get("se", 0) * file_bytes + stage_outs * file_bytes + out_bytes
    return Moved(peer, centre)


def trivial_workflow(name: str, tasks: int) -> dict[str, Any]:
    """``tasks`` tasks that run ``/bin/true``."""
    return {"name": name, "tasks": [{"name": f"t{i}", "command": "true"} for i in range(tasks)]}


def data_workflow(name: str, producers: int, merges: int, fan_in: int, mib: int) -> dict[str, Any]:
    """``producers`` tasks each write ``mib`` MiB to an intermediate LFN; ``merges`` tasks each
    read ``fan_in`` of them (merge i: producers i*fan_in .. , wrapping round) and write their
    total size (the same workload as the TaskVine manager's ``data``)."""
    size = mib * MIB
    produced = [f"/store/{name}/p{i}.dat" for i in range(producers)]
    tasks: list[dict[str, Any]] = [
        {
            "name": f"p{i}",
            "step": 0,
            "command": f"sh -c 'head -c {size} /dev/urandom > $TQ_OUTPUTS'",
            "outputs": [lfn],
        }
        for i, lfn in enumerate(produced)
    ]
    for i in range(merges):
        tasks.append(
            {
                "name": f"m{i}",
                "step": 1,
                "command": "sh -c 'cat $TQ_INPUTS | wc -c > $TQ_OUTPUTS'",
                "inputs": [produced[(i * fan_in + k) % producers] for k in range(fan_in)],
                "outputs": [f"/store/{name}/m{i}.txt"],
            }
        )
    return {"name": name, "tasks": tasks}


@dataclass(frozen=True)
class Line:
    """One line of the table: a system running a workload in an architecture."""

    system: str
    architecture: str
    workload: str  # "trivial" or "data"
    tasks: int
    failed: int
    seconds: float  # first submit to last task done
    cpu: float  # the central service's CPU seconds over that span
    moved: Moved | None = None
    note: str = ""

    @property
    def rate(self) -> float:
        return self.tasks / self.seconds if self.seconds > 0 else math.inf

    @property
    def cpu_ms_per_task(self) -> float:
        return 1000 * self.cpu / self.tasks if self.tasks else math.nan


def median_line(runs: Sequence[Line], note: str = "") -> Line:
    """One line for several runs of the same system: the median of their tasks/s and of their
    CPU per task (each taken alone), the range of both in the note."""
    if len(runs) == 1:
        return dataclasses.replace(runs[0], note=note)
    rates = sorted(line.rate for line in runs)
    cpus = sorted(line.cpu_ms_per_task for line in runs)
    rate, cpu, tasks = statistics.median(rates), statistics.median(cpus), runs[0].tasks
    spread = (
        f"median of {len(runs)} runs: {rates[0]:.0f}-{rates[-1]:.0f} tasks/s, "
        f"{cpus[0]:.2f}-{cpus[-1]:.2f} ms/task"
    )
    return Line(
        runs[0].system,
        runs[0].architecture,
        runs[0].workload,
        tasks,
        max(line.failed for line in runs),
        tasks / rate,
        cpu * tasks / 1000,
        note=f"{spread}; {note}" if note else spread,
    )


def goal(line: Line, taskvine: Line | None) -> str:
    """``ahead of TaskVine`` met or missed for one of our lines, against TaskVine's line of the
    same workload in the same run: more tasks per second and less central CPU per task on the
    trivial tasks; a shorter turnaround and no more bytes through the centre on the data
    workflow.  A line with failed tasks misses."""
    if line.system == TASKVINE:
        return "(baseline)"
    if taskvine is None:
        return "- (no TaskVine line to compare)"
    if line.failed:
        return f"MISSED ({line.failed} tasks failed)"
    behind: list[str] = []
    if line.workload == "trivial":
        if line.rate < taskvine.rate:
            behind.append(f"tasks/s {line.rate / taskvine.rate:.2f}x")
        if line.cpu_ms_per_task > taskvine.cpu_ms_per_task:
            behind.append(f"CPU/task {line.cpu_ms_per_task / taskvine.cpu_ms_per_task:.2f}x")
    else:
        assert line.moved is not None and taskvine.moved is not None
        if line.seconds > taskvine.seconds:
            behind.append(f"turnaround {line.seconds / taskvine.seconds:.2f}x")
        if line.moved.centre > taskvine.moved.centre:
            behind.append(
                f"via centre {_mib(line.moved.centre)} MiB against {_mib(taskvine.moved.centre)}"
            )
    return "met" if not behind else "MISSED (" + ", ".join(behind) + ")"


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / MIB:.0f}"


def table(lines: Sequence[Line]) -> str:
    """One row per line, with the goal's verdict against TaskVine's line of the same workload."""
    baseline = {
        line.workload: line for line in lines if line.system == TASKVINE and not line.failed
    }

    def verdict(line: Line) -> str:
        return goal(line, baseline.get(line.workload)) + (f"  [{line.note}]" if line.note else "")

    columns: tuple[Column[Line], ...] = (
        Column("system", "<11", lambda line: line.system),
        Column("architecture", "<17", lambda line: line.architecture),
        Column("workload", "<8", lambda line: line.workload),
        Column("tasks", ">5", lambda line: line.tasks),
        Column("tasks/s", ">8", lambda line: f"{line.rate:.1f}"),
        Column("CPU ms/task", ">11", lambda line: f"{line.cpu_ms_per_task:.2f}"),
        Column("turnaround s", ">12", lambda line: f"{line.seconds:.1f}"),
        Column("peer MiB", ">8", lambda line: _mib(line.moved.peer if line.moved else None)),
        Column("centre MiB", ">10", lambda line: _mib(line.moved.centre if line.moved else None)),
        Column("ahead of TaskVine", "", verdict, gap="  "),
    )
    return text_table(columns, lines)
