"""Workflow submission: a whole workflow stored in one transaction, or nothing (Hasham 2011 §IV).

Every task is stored; those whose inputs exist and that wait for no other task are queued at
once (and handed to the matcher after the commit), the others wait for ``complete`` to release
them.  An output that exists, or that another task not failed (waiting, queued, running or done)
produces, is refused with one line naming both tasks and workflows: two producers of one LFN
would overwrite each other's file on the SE.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from glidein_ext.errors import WorkflowError
from glidein_ext.tq.client.limits import shorten
from glidein_ext.tq.models import QueuedTask, TaskState
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.matching.match_groups import task_ad
from glidein_ext.tq.service.store.core import (
    StoreCore,
    Tx,
    ad_problem,
    chunks,
    inserted_id,
    spec_json,
)
from glidein_ext.tq.workflow import TaskDef, WorkflowDef


class WorkflowSubmission:
    """``submit``: the operators' side of the store."""

    def __init__(self, core: StoreCore) -> None:
        self.core = core

    def submit(self, tx: Tx, workflow: WorkflowDef) -> int:
        """Insert a whole workflow in the caller's transaction; WorkflowError if bad (the caller's
        transaction then rolls back: nothing stored)."""
        now = self.core.clock()
        _check_matchable(workflow.tasks)
        conn = tx.conn
        _check_producers(conn, workflow)
        wanted = (
            set(workflow.external_inputs)
            | set(workflow.available)
            | {lfn for task in workflow.tasks for lfn in task.outputs}
        )
        existing = _existing_files(conn, wanted)
        for task in workflow.tasks:
            for lfn in task.outputs:
                if lfn in existing:
                    raise WorkflowError(f"{lfn!r} already exists", task.name, "outputs")
            for lfn in task.inputs:
                if lfn in workflow.external_inputs and lfn not in existing:
                    raise WorkflowError(
                        f"{lfn!r} is produced by no task and is not available",
                        task.name,
                        "inputs",
                    )
        have = existing | set(workflow.available)
        new_files = sorted(set(workflow.available) - existing)
        if new_files:
            conn.execute(
                sa.insert(t.files),
                [{"lfn": lfn, "produced_by": None, "created_at": now} for lfn in new_files],
            )
        wf_id = inserted_id(
            conn.execute(sa.insert(t.workflows).values(name=workflow.name, submitted_at=now))
        )
        rows = []
        spec_texts: dict[int, str] = {}  # by object: equal specs are one (``parse_workflow``)
        for task in workflow.tasks:
            ready = not task.after and all(lfn in have for lfn in task.inputs)
            spec_text = spec_texts.get(id(task.spec))
            if spec_text is None:
                spec_text = spec_texts[id(task.spec)] = spec_json(task.spec)
            rows.append(
                {
                    "workflow_id": wf_id,
                    "name": task.name,
                    "step": task.step,
                    "command": task.command,
                    "spec": spec_text,
                    "inputs": json.dumps(list(task.inputs)),
                    "outputs": json.dumps(list(task.outputs)),
                    "after": "[]",
                    "priority": task.priority,
                    "max_retries": task.max_retries,
                    "state": (TaskState.QUEUED if ready else TaskState.WAITING).value,
                    "attempt": 0,
                    "failures": 0,
                    "runnable_since": now if ready else None,
                }
            )
        conn.execute(sa.insert(t.tasks), rows)
        ids = dict(
            conn.execute(
                sa.select(t.tasks.c.name, t.tasks.c.id).where(t.tasks.c.workflow_id == wf_id)
            ).all()
        )
        for table, side in ((t.task_outputs, "outputs"), (t.task_inputs, "inputs")):
            lfns = [
                {"task_id": ids[task.name], "lfn": lfn}
                for task in workflow.tasks
                for lfn in getattr(task, side)
            ]
            if lfns:
                conn.execute(sa.insert(table), lfns)
        after = [
            {"task_id": ids[task.name], "after_id": ids[other]}
            for task in workflow.tasks
            for other in task.after
        ]
        if after:
            conn.execute(sa.insert(t.task_after), after)
            for task in workflow.tasks:
                if task.after:
                    conn.execute(
                        t.tasks.update()
                        .where(t.tasks.c.id == ids[task.name])
                        .values(after=json.dumps([ids[o] for o in task.after]))
                    )
        queued = [
            QueuedTask(ids[task.name], task.spec, task.inputs, task.priority, now)
            for task, row in zip(workflow.tasks, rows, strict=True)
            if row["state"] == TaskState.QUEUED.value
        ]

        def admit() -> None:
            for item in queued:
                self.core.admit_task(item)

        tx.after_commit(admit)
        return wf_id


def _check_matchable(tasks: Iterable[TaskDef]) -> None:
    """Every task's ad builds (one per distinct spec): nothing stored can fail the matcher."""
    seen: set[str] = set()
    for task in tasks:
        key = task.spec.key()
        if key not in seen:
            seen.add(key)
            problem = ad_problem(functools.partial(task_ad, task.spec))
            if problem is not None:
                raise WorkflowError(problem, task.name, "requirements")


def _check_producers(conn: Connection, workflow: WorkflowDef) -> None:
    """No output of ``workflow`` is an output of a task (of any workflow) that has not failed."""
    mine = {lfn: task.name for task in workflow.tasks for lfn in task.outputs}
    query = (
        sa.select(
            t.task_outputs.c.lfn,
            t.tasks.c.name,
            t.tasks.c.state,
            t.workflows.c.id,
            t.workflows.c.name.label("workflow"),
        )
        .join(t.tasks, t.tasks.c.id == t.task_outputs.c.task_id)
        .join(t.workflows, t.workflows.c.id == t.tasks.c.workflow_id)
        .where(t.tasks.c.state != TaskState.FAILED.value)
    )
    for chunk in chunks(sorted(mine)):
        row = conn.execute(query.where(t.task_outputs.c.lfn.in_(chunk)).limit(1)).first()
        if row is not None:
            raise WorkflowError(
                f"{shorten(row.lfn)} is already an output of task {row.name!r} ({row.state}) "
                f"of workflow {row.id} {row.workflow!r}; workflow {workflow.name!r} not submitted",
                mine[row.lfn],
                "outputs",
            )


def _existing_files(conn: Connection, lfns: Iterable[str]) -> set[str]:
    found: set[str] = set()
    for chunk in chunks(list(lfns)):
        found.update(
            conn.execute(sa.select(t.files.c.lfn).where(t.files.c.lfn.in_(chunk))).scalars()
        )
    return found
