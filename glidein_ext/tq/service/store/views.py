"""The operators' views of the store: ``status`` (``GET /api/v1/status``) and every task's row."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from glidein_ext.tq.client.protocol import Status, WorkflowStatus
from glidein_ext.tq.models import PilotState, TaskState
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.store.core import StoreCore, record


@dataclass(frozen=True)
class TaskRow:
    """One task as stored, its JSON lists decoded (tests and diagnostics read it)."""

    id: int
    workflow_id: int
    name: str
    step: int
    command: str
    state: str
    attempt: int  # bumped at each assignment
    failures: int
    max_retries: int
    priority: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    after: tuple[int, ...]
    pilot_id: int | None
    exit_code: int | None
    report: str | None
    runnable_since: float | None
    finished_at: float | None


class StatusViews:
    """Read-only views, in the caller's transaction."""

    def __init__(self, core: StoreCore) -> None:
        self.core = core

    def status(self, conn: Connection) -> Status:
        """Workflows with their tasks by state; pilots by site and state."""
        counts: dict[int, Counter[str]] = {}
        for wf_id, state, n in conn.execute(
            sa.select(t.tasks.c.workflow_id, t.tasks.c.state, sa.func.count()).group_by(
                t.tasks.c.workflow_id, t.tasks.c.state
            )
        ):
            counts.setdefault(wf_id, Counter())[state] = n
        workflows = tuple(
            record(
                WorkflowStatus,
                row,
                tasks={s.value: counts.get(row.id, Counter())[s.value] for s in TaskState},
            )
            for row in conn.execute(sa.select(t.workflows).order_by(t.workflows.c.id))
        )
        pilots: dict[str, dict[str, int]] = {}
        for site, state, n in conn.execute(
            sa.select(t.pilots.c.site, t.pilots.c.state, sa.func.count()).group_by(
                t.pilots.c.site, t.pilots.c.state
            )
        ):
            pilots.setdefault(site, {})[state] = n
        for site, _state, n in conn.execute(
            sa.select(t.submissions.c.site, t.submissions.c.state, sa.func.count())
            .where(t.submissions.c.state == "inactive")
            .group_by(t.submissions.c.site, t.submissions.c.state)
        ):
            pilots.setdefault(site, {})[PilotState.INACTIVE.value] = n
        completions = conn.execute(sa.select(sa.func.count()).select_from(t.completions))
        return Status(
            workflows=workflows,
            pilots=pilots,
            completions=completions.scalar_one(),
            queued_groups=self.core.matcher.group_count,
        )

    def task_rows(self, conn: Connection) -> list[TaskRow]:
        """Every task, in id order."""
        rows = conn.execute(sa.select(t.tasks).order_by(t.tasks.c.id)).all()
        return [_task_row(row) for row in rows]


_JSON_LISTS = ("inputs", "outputs", "after")  # columns holding a JSON list


def _task_row(row: Any) -> TaskRow:
    lists = {name: tuple(json.loads(getattr(row, name))) for name in _JSON_LISTS}
    return record(TaskRow, row, **lists)
