"""Workflow submission: a whole workflow stored in one transaction, or nothing (seed 001 IV).

Every task is stored; those whose inputs exist and that wait for no other task are queued at
once (and handed to the matcher after the commit), the others wait for ``complete`` to release
them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from glidein_ext.errors import WorkflowError
from glidein_ext.tq import tables as t
from glidein_ext.tq.models import QueuedTask, TaskState
from glidein_ext.tq.store.core import StoreCore, chunks, inserted_id, spec_json
from glidein_ext.tq.workflow import WorkflowDef


class WorkflowSubmission(StoreCore):
    """``submit``: the operators' side of the store."""

    def submit(self, workflow: WorkflowDef) -> int:
        """Insert a whole workflow in one transaction; WorkflowError and nothing stored if bad."""
        now = self.clock()
        with self._lock, self._tx() as conn:
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
            for task in workflow.tasks:
                ready = not task.after and all(lfn in have for lfn in task.inputs)
                rows.append(
                    {
                        "workflow_id": wf_id,
                        "name": task.name,
                        "step": task.step,
                        "command": task.command,
                        "spec": spec_json(task.spec),
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
            inputs = [
                {"task_id": ids[task.name], "lfn": lfn}
                for task in workflow.tasks
                for lfn in task.inputs
            ]
            if inputs:
                conn.execute(sa.insert(t.task_inputs), inputs)
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
        for item in queued:
            self.matcher.add_task(item)
        return wf_id


def _existing_files(conn: Connection, lfns: Iterable[str]) -> set[str]:
    found: set[str] = set()
    for chunk in chunks(list(lfns)):
        found.update(
            conn.execute(sa.select(t.files.c.lfn).where(t.files.c.lfn.in_(chunk))).scalars()
        )
    return found
