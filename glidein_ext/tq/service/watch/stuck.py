"""Stuck work, said out loud: pure detection over snapshots of the Task Queue's state.

A periodic loop of the service (``tq.service.watch.ops``) reads a :class:`Snapshot` from the
database and hands it to :meth:`StuckDetector.observe`, which answers the warnings that hold now.
Three kinds, whatever the sites' architecture (pre-DHT, centralized or distributed: the snapshot is
the database's view, which every architecture keeps):

- ``queued-idle``: a task has been queued while at least one live, idle pilot that may run it
  (Requirements both ways, resources, remaining life: the matcher's rules, Hasham 2011 §IV-E) stays
  idle, continuously for more than ``queued_after`` seconds.  waitForData holds a task back from
  such pilots for ``wait_for_data`` seconds at most, so the threshold should exceed it.
- ``silent-pilot``: a busy pilot not heard of (heartbeat, or its master's call at a distributed
  site) for more than ``silent_after`` seconds; the reaper ends it only at the heartbeat timeout.
- ``no-progress``: an unfinished workflow with no task running and no task ended for more than
  ``stalled_after`` seconds (since its submission, at first).

The detector remembers since when each task has been in the ``queued-idle`` condition (one
snapshot without it resets the clock); the other two are read from the snapshot's times.  Time
is passed in: unit tests drive it with plain values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

QUEUED_IDLE = "queued-idle"
SILENT_PILOT = "silent-pilot"
NO_PROGRESS = "no-progress"
MAX_NAMED = 5  # ids named in one warning's line


@dataclass(frozen=True)
class QueuedTask:
    """A queued task and the live idle pilots that may run it now."""

    task_id: int
    workflow_id: int
    idle_matches: tuple[int, ...]


@dataclass(frozen=True)
class BusyPilot:
    pilot_id: int
    site: str
    task_id: int | None
    last_seen: float


@dataclass(frozen=True)
class WorkflowProgress:
    """An unfinished workflow: its tasks running now, and its last change (a task's end, or the
    submission)."""

    workflow_id: int
    name: str
    unfinished: int
    running: int
    last_change: float
    queued: int = 0
    unmatched: tuple[int, ...] = ()  # its queued tasks no live pilot may run (their ids)


@dataclass(frozen=True)
class Snapshot:
    now: float
    queued: Sequence[QueuedTask] = ()
    busy: Sequence[BusyPilot] = ()
    workflows: Sequence[WorkflowProgress] = ()


@dataclass(frozen=True)
class StuckWarning:
    """One warning: its kind, what it is about (``task 12``, ``pilot 3``, ``workflow 1``), since
    when the condition holds, and one line for operators."""

    kind: str
    subject: str
    since: float
    message: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Thresholds:
    queued_after: float = 300.0
    silent_after: float = 90.0
    stalled_after: float = 1800.0


def _unmatched(wf: WorkflowProgress) -> str:
    """What a stalled workflow's queued tasks lack: a live pilot that may run them."""
    if not wf.unmatched:
        return ""
    why = f"(why: tq task {wf.unmatched[0]})"
    if len(wf.unmatched) == wf.queued:
        return f"; none of its {wf.queued} queued task(s) matches a live pilot {why}"
    return f"; {len(wf.unmatched)} of its {wf.queued} queued task(s) match no live pilot {why}"


def _named(ids: Sequence[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:MAX_NAMED])
    return shown + (f" and {len(ids) - MAX_NAMED} more" if len(ids) > MAX_NAMED else "")


class StuckDetector:
    """The warnings of each snapshot; ``current`` keeps the last ones (for ``tq status``)."""

    def __init__(self, thresholds: Thresholds) -> None:
        self.thresholds = thresholds
        self._queued_idle_since: dict[int, float] = {}
        self.current: list[StuckWarning] = []

    def observe(self, snapshot: Snapshot) -> list[StuckWarning]:
        """The warnings that hold at ``snapshot.now``; also kept in ``current``."""
        now = snapshot.now
        found = self._queued_idle(snapshot)
        limit = self.thresholds.silent_after
        for pilot in snapshot.busy:
            if now - pilot.last_seen > limit:
                held = f" running task {pilot.task_id}" if pilot.task_id is not None else ""
                found.append(
                    StuckWarning(
                        SILENT_PILOT,
                        f"pilot {pilot.pilot_id}",
                        pilot.last_seen,
                        f"pilot {pilot.pilot_id} at {pilot.site} is busy{held} but silent for "
                        f"{now - pilot.last_seen:.0f} s (no heartbeat, no master's call)",
                    )
                )
        limit = self.thresholds.stalled_after
        for wf in snapshot.workflows:
            if wf.unfinished > 0 and wf.running == 0 and now - wf.last_change > limit:
                found.append(
                    StuckWarning(
                        NO_PROGRESS,
                        f"workflow {wf.workflow_id}",
                        wf.last_change,
                        f"workflow {wf.workflow_id} ({wf.name}) made no progress for "
                        f"{now - wf.last_change:.0f} s: {wf.unfinished} task(s) unfinished, "
                        f"none running{_unmatched(wf)}",
                    )
                )
        self.current = found
        return found

    def _queued_idle(self, snapshot: Snapshot) -> list[StuckWarning]:
        now = snapshot.now
        since: dict[int, float] = {}
        late: list[tuple[QueuedTask, float]] = []
        for task in snapshot.queued:
            if not task.idle_matches:
                continue
            start = self._queued_idle_since.get(task.task_id, now)
            since[task.task_id] = start
            if now - start > self.thresholds.queued_after:
                late.append((task, start))
        self._queued_idle_since = since  # a task out of the condition starts afresh
        found = []
        for task, start in late:
            found.append(
                StuckWarning(
                    QUEUED_IDLE,
                    f"task {task.task_id}",
                    start,
                    f"task {task.task_id} (workflow {task.workflow_id}) has been queued for "
                    f"{now - start:.0f} s while pilot(s) {_named(task.idle_matches)} that may "
                    "run it stay idle",
                )
            )
        return found


def new_warnings(
    before: Sequence[StuckWarning], after: Sequence[StuckWarning]
) -> list[StuckWarning]:
    """The warnings of ``after`` that ``before`` did not have (each is logged once)."""
    seen = {(w.kind, w.subject) for w in before}
    return [w for w in after if (w.kind, w.subject) not in seen]


def cleared(before: Sequence[StuckWarning], after: Sequence[StuckWarning]) -> list[StuckWarning]:
    """The warnings of ``before`` that no longer hold."""
    still = {(w.kind, w.subject) for w in after}
    return [w for w in before if (w.kind, w.subject) not in still]
