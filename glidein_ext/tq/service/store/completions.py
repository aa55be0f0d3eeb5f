"""A task's end (Hasham 2011 §IV): the completion report, counted once, and the tasks it releases.

Completions are keyed by (task, attempt): a repeated report is answered ``duplicate``, a stale one
(the task was requeued and handed out again meanwhile) is answered and not counted, so a report
retried across a TQ restart, or sent through two TQ processes on one database, counts once.  The
pilot's row is locked before the task's, as in every operation.  A success stores the outputs and
queues the waiting tasks whose inputs and predecessors are now all there; a failure requeues the
task until it has failed ``max_retries + 1`` times.  A success whose output another task already
produced (submit refuses that; a race between TQ processes, or an older database, may not) ends
the task failed for good, with the reason in its report: a completion never loops.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from glidein_ext.errors import TaskQueueNotFound
from glidein_ext.tq.client.limits import shorten
from glidein_ext.tq.client.protocol import Completion, CompletionAnswer
from glidein_ext.tq.models import UNFINISHED, Architecture, PilotState, QueuedTask, TaskState
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.store.core import StoreCore, Tx, chunks, queued_task, reread_queued
from glidein_ext.tq.service.store.direct import run
from glidein_ext.tq.service.store.statements import constant_in, insert_row, row_by_id, update_row

REPORT_CHARS = 4000  # of a task's report (its log's tail) kept in the database

# The request path's statements, built once (``statements``).
_SEEN = sa.select(t.completions.c.ok).where(
    t.completions.c.task_id == sa.bindparam("task"),
    t.completions.c.attempt == sa.bindparam("attempt"),
)
# One unfinished task of the workflow is enough to know it goes on (an index lookup, not a count).
_UNFINISHED = (
    sa.select(t.tasks.c.id)
    .where(
        t.tasks.c.workflow_id == sa.bindparam("workflow"),
        constant_in(t.tasks.c.state, UNFINISHED),
    )
    .limit(1)
)
# The tasks that wait for this one and whether its workflow goes on, in one statement (a round
# trip fewer on PostgreSQL): one row per waiting task, or a single row with no task.
_ONE = sa.select(sa.literal_column("1").label("one")).subquery("one")
_AFTER_AND_UNFINISHED = sa.select(
    t.task_after.c.task_id, _UNFINISHED.scalar_subquery().label("unfinished")
).select_from(_ONE.outerjoin(t.task_after, t.task_after.c.after_id == sa.bindparam("done")))
_LFNS: sa.BindParameter[list[str]] = sa.bindparam("lfns", expanding=True)
_READERS = sa.select(t.task_inputs.c.task_id).where(t.task_inputs.c.lfn.in_(_LFNS))
# One output (the usual case) without an expanding list, so that it runs on the driver.
_READERS_OF_ONE = sa.select(t.task_inputs.c.task_id).where(
    t.task_inputs.c.lfn == sa.bindparam("lfn")
)
_PRODUCERS = sa.select(t.files.c.lfn, t.files.c.produced_by).where(t.files.c.lfn.in_(_LFNS))
_DROP_FILES = t.files.delete().where(t.files.c.lfn.in_(_LFNS))
_ADD_FILES = sa.insert(t.files)
# A task a completion may release: locked, still waiting; what it still lacks.
_WAITING = (
    sa.select(t.tasks)
    .where(t.tasks.c.id == sa.bindparam("task"), t.tasks.c.state == TaskState.WAITING.value)
    .with_for_update()
)
_BEFORE = t.tasks.alias("predecessor")
# The inputs it still lacks plus the tasks it must still wait for, in one statement.
_LACKING = sa.select(
    sa.select(sa.func.count())
    .select_from(t.task_inputs.outerjoin(t.files, t.files.c.lfn == t.task_inputs.c.lfn))
    .where(t.task_inputs.c.task_id == sa.bindparam("task"), t.files.c.lfn.is_(None))
    .scalar_subquery()
    + sa.select(sa.func.count())
    .select_from(t.task_after.join(_BEFORE, _BEFORE.c.id == t.task_after.c.after_id))
    .where(t.task_after.c.task_id == sa.bindparam("task"), _BEFORE.c.state != TaskState.DONE.value)
    .scalar_subquery()
)


@dataclass(frozen=True)
class Ended:
    """What an accepted completion changed, for the site's bookkeeping in the same transaction
    (``sites``): no row is read again for it."""

    workflow_id: int
    state: TaskState
    outputs: tuple[str, ...]  # the task's declared outputs
    site: str  # the reporting pilot's
    finished: bool  # the workflow has no task left waiting, queued or running
    # The reporting pilot's row as read (locked) before the report, and what the report changes
    # in it: written already, unless the caller said it writes them itself (``defer_pilot``).
    pilot: Any = None
    pilot_values: Mapping[str, Any] = field(default_factory=dict)
    queued: int = 0  # tasks it queued (released, or this one again): the matcher learns them later


class Completions:
    """``complete``: the report of a task's end, idempotent per (task, attempt)."""

    def __init__(self, core: StoreCore) -> None:
        self.core = core

    def complete(self, tx: Tx, pilot_id: int, completion: Completion) -> CompletionAnswer:
        """A task's end; idempotent: a repeated or stale report is answered, never counted twice."""
        return self.complete_ended(tx, pilot_id, completion)[0]

    def complete_ended(
        self, tx: Tx, pilot_id: int, completion: Completion, *, defer_pilot: bool = False
    ) -> tuple[CompletionAnswer, Ended | None]:
        """``complete``, and what an accepted report changed (None when not accepted).
        ``defer_pilot``: the pilot's row is left as it was, and the caller writes
        ``Ended.pilot_values`` to it in this transaction (with its own update of the row)."""
        task_id, attempt, exit_code = completion.task_id, completion.attempt, completion.exit_code
        now = self.core.clock()
        newly_queued: list[QueuedTask] = []
        conn = tx.conn
        pilot = row_by_id(conn, t.pilots, pilot_id, locked=True)
        task = row_by_id(conn, t.tasks, task_id, locked=True)
        if task is None:
            raise TaskQueueNotFound(f"no task {task_id}")
        current = (
            task.state == TaskState.RUNNING.value
            and task.attempt == attempt
            and task.pilot_id == pilot_id
        )
        if not current or pilot is None:
            # An accepted report moves its task out of this (running, attempt, pilot) in the
            # same transaction as it is recorded: only a report that is not current can be a
            # repeat, so only then is the completions' table asked.
            seen = run(conn, _SEEN, {"task": task_id, "attempt": attempt}).one_or_none()
            duplicate = seen is not None
            return CompletionAnswer(accepted=False, duplicate=duplicate, state=task.state), None
        declared = json.loads(task.outputs)
        ok = exit_code == 0 and set(declared) <= set(completion.outputs)
        clash = _produced_elsewhere(conn, declared) if ok else None
        ok = ok and clash is None
        insert_row(
            conn,
            t.completions,
            {
                "task_id": task_id,
                "attempt": attempt,
                "pilot_id": pilot_id,
                "exit_code": exit_code,
                "ok": int(ok),
                "at": now,
            },
        )
        pilot_values: dict[str, Any] = {
            "state": PilotState.IDLE.value,
            "task_id": None,
            "last_seen": now,
        }
        finished: bool | None = None
        if clash is not None:
            state = _clashed(conn, task, clash, completion.report, now)
        elif ok:
            newly_queued, finished = _succeeded(
                conn, task, declared, completion.report, now, pilot.site
            )
            if self.core.default_architecture is Architecture.PRE_DHT and declared:
                cached = {*json.loads(pilot.cached), *declared}
                pilot_values["cached"] = json.dumps(sorted(cached))
            state = TaskState.DONE
        else:
            state, newly_queued = _failed(conn, task, exit_code, completion.report, now)
        if finished is None:
            finished = run(conn, _UNFINISHED, {"workflow": task.workflow_id}).first() is None
        if not defer_pilot:
            update_row(conn, t.pilots, pilot_id, pilot_values)

        def ended() -> None:
            for item in newly_queued:
                self.core.admit_task(item)
            self.core.matcher.set_idle(pilot_id, True)
            if ok and self.core.default_architecture is Architecture.PRE_DHT:
                self.core.matcher.add_cached(pilot_id, declared)

        tx.after_commit(ended)
        answer = CompletionAnswer(accepted=True, duplicate=False, state=state.value)
        changed = Ended(
            task.workflow_id,
            state,
            tuple(declared),
            pilot.site,
            finished,
            pilot,
            pilot_values,
            len(newly_queued),
        )
        return answer, changed


def _succeeded(
    conn: Connection, task: Any, declared: Sequence[str], report: str, now: float, site: str
) -> tuple[list[QueuedTask], bool]:
    """Done: its outputs exist now, at the reporting pilot's site (Delgado Peris 2014 §III.B);
    the waiting tasks this releases, and whether the workflow is finished."""
    done = {"state": TaskState.DONE.value, "exit_code": 0, "report": report[:REPORT_CHARS]}
    update_row(conn, t.tasks, task.id, {**done, "finished_at": now})
    if declared:
        conn.execute(
            _ADD_FILES,
            [
                {"lfn": lfn, "produced_by": task.id, "created_at": now, "site": site}
                for lfn in declared
            ],
        )
    return _release(conn, task, declared, now)


def _produced_elsewhere(conn: Connection, declared: Sequence[str]) -> str | None:
    """Why this task's outputs cannot be recorded: one exists, produced by another task; or None.
    A file declared available since (no producer) becomes this task's."""
    available = []
    for chunk in chunks(declared):
        for lfn, producer in conn.execute(_PRODUCERS, {"lfns": chunk}):
            if producer is not None:
                return f"output {shorten(lfn)} was already produced by task {producer}"
            available.append(lfn)
    for chunk in chunks(available):
        conn.execute(_DROP_FILES, {"lfns": chunk})
    return None


def _clashed(conn: Connection, task: Any, clash: str, report: str, now: float) -> TaskState:
    """Failed for good: retrying would clash again."""
    conn.execute(
        t.tasks.update()
        .where(t.tasks.c.id == task.id)
        .values(
            state=TaskState.FAILED.value,
            failures=task.failures + 1,
            exit_code=0,
            report=f"{clash}: not recorded\n{report}"[:REPORT_CHARS],
            pilot_id=None,
            finished_at=now,
        )
    )
    return TaskState.FAILED


def _failed(
    conn: Connection, task: Any, exit_code: int, report: str, now: float
) -> tuple[TaskState, list[QueuedTask]]:
    """Failed: queued again while retries are left, else failed for good."""
    failures = task.failures + 1
    state = TaskState.FAILED if failures > task.max_retries else TaskState.QUEUED
    conn.execute(
        t.tasks.update()
        .where(t.tasks.c.id == task.id)
        .values(
            state=state.value,
            failures=failures,
            exit_code=exit_code,
            report=report[:REPORT_CHARS],
            pilot_id=None,
            finished_at=now if state is TaskState.FAILED else None,
        )
    )
    return state, [reread_queued(conn, task.id)] if state is TaskState.QUEUED else []


def _release(
    conn: Connection, done: Any, outputs: Sequence[str], now: float
) -> tuple[list[QueuedTask], bool]:
    """Waiting tasks that read these outputs or wait for this task, and are now runnable; and
    whether the workflow is finished (releasing keeps a task unfinished: waiting to queued)."""
    candidates: set[int] = set()
    if len(outputs) == 1:
        candidates.update(run(conn, _READERS_OF_ONE, {"lfn": outputs[0]}).scalars())
    else:
        for chunk in chunks(outputs):
            candidates.update(conn.execute(_READERS, {"lfns": chunk}).scalars())
    rows = run(conn, _AFTER_AND_UNFINISHED, {"done": done.id, "workflow": done.workflow_id}).all()
    candidates.update(row.task_id for row in rows if row.task_id is not None)
    finished = rows[0].unfinished is None
    released: list[QueuedTask] = []
    for task_id in sorted(candidates):
        # Locked: of two completions (in two processes) providing its last inputs, the
        # second waits here and then sees the first's files.
        row = run(conn, _WAITING, {"task": task_id}).one_or_none()
        if row is None or run(conn, _LACKING, {"task": task_id}).scalar_one():
            continue
        update_row(conn, t.tasks, task_id, {"state": TaskState.QUEUED.value, "runnable_since": now})
        released.append(queued_task(row, since=now))  # read before its update
    return released, finished
