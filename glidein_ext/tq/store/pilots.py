"""The pilot protocol's life cycle (seed 001 IV, IV-D, IV-E): register, request, heartbeat, leave.

A task is handed out by a conditional update (``state = 'queued'``): of two TQ processes on one
database choosing the same task, the second blocks on the row until the first commits, then
updates nothing and chooses again.  The pilot's row is locked first in every operation, so a
reaper in another process cannot requeue a task while it is being assigned.  A pilot that leaves
or is lost gives its running task back to the queue.  The completion report is in
``completions.py``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from glidein_ext.errors import TaskQueueNotFound, TaskQueueRequestError
from glidein_ext.tq import tables as t
from glidein_ext.tq.matcher import pilot_ad
from glidein_ext.tq.models import PilotInfo, PilotState, QueuedTask, TaskState
from glidein_ext.tq.protocol import (
    Assignment,
    HeartbeatAnswer,
    Neighbour,
    RegisterAnswer,
    Registration,
)
from glidein_ext.tq.store.core import (
    ACTIVE,
    StoreCore,
    ad_problem,
    cached_json,
    inserted_id,
    live_pilot,
    locked_pilot,
    pilot_info,
    reread_queued,
)


class PilotProtocol(StoreCore):
    """The pilots' side of the store; every method is one transaction, the matcher after it."""

    def register(self, reg: Registration) -> RegisterAnswer:
        """A new pilot: its id, the heartbeat it owes, and the other pilots on its host (IV-D)."""
        now = self.clock()
        info = PilotInfo(
            0,
            reg.site,
            reg.host,
            reg.se,
            reg.cpus,
            reg.memory,
            reg.disk,
            None,
            dict(reg.attributes),
            reg.requirements,
            reg.rank,
        )
        problem = ad_problem(functools.partial(pilot_ad, info))
        if problem is not None:
            raise TaskQueueRequestError(f"pilot registration {problem}")
        with self._lock, self._tx() as conn:
            inserted = conn.execute(
                sa.insert(t.pilots).values(
                    site=reg.site,
                    host=reg.host,
                    se=reg.se,
                    cpus=reg.cpus,
                    memory=reg.memory,
                    disk=reg.disk,
                    expires_at=None if reg.ttl is None else now + reg.ttl,
                    attributes=json.dumps(dict(reg.attributes)),
                    requirements=reg.requirements,
                    rank=reg.rank,
                    cache_dir=reg.cache_dir,
                    cached=json.dumps(sorted(reg.cached)),
                    batch_id=reg.batch_id,
                    state=PilotState.IDLE.value,
                    registered_at=now,
                    last_seen=now,
                )
            )
            pilot_id = inserted_id(inserted)
            if reg.batch_id:
                conn.execute(
                    t.submissions.update()
                    .where(t.submissions.c.batch_id == reg.batch_id)
                    .values(state="registered")
                )
            row = conn.execute(sa.select(t.pilots).where(t.pilots.c.id == pilot_id)).one()
            others = _neighbours(conn, row)
        self.matcher.add_pilot(pilot_info(row))  # its ad was built above: it cannot fail here
        return RegisterAnswer(
            pilot_id=pilot_id,
            heartbeat_interval=self.heartbeat_interval,
            cache_mode=self.cache_mode.value,
            others=others,
        )

    def request(self, pilot_id: int, cached: Sequence[str] | None = None) -> Assignment | None:
        """Seed IV-E: match the pilot to its best task and assign it; None when nothing fits."""
        now = self.clock()
        with self._lock, self._tx() as conn:
            row = live_pilot(conn, pilot_id)
            if self.matcher.pilot(pilot_id) is None and not self.admit_pilot(row):
                raise TaskQueueNotFound(f"pilot {pilot_id} cannot be matched (see /healthz)")
            values = _seen(now, cached)
            if cached is not None:
                self.matcher.set_cache(pilot_id, cached)  # the choice below uses the new list
            if row.task_id is not None:
                # The pilot asks again while holding a task (it lost our answer): same task.
                task = conn.execute(sa.select(t.tasks).where(t.tasks.c.id == row.task_id)).one()
                if task.state == TaskState.RUNNING.value and task.pilot_id == pilot_id:
                    conn.execute(t.pilots.update().where(t.pilots.c.id == pilot_id).values(values))
                    return _assignment(task, hits=0)
            while True:
                choice = self.matcher.choose(pilot_id, now)
                if choice is None:
                    values.update(state=PilotState.IDLE.value, task_id=None)
                    conn.execute(t.pilots.update().where(t.pilots.c.id == pilot_id).values(values))
                    self.matcher.set_idle(pilot_id, True)
                    return None
                taken = conn.execute(
                    t.tasks.update()
                    .where(
                        t.tasks.c.id == choice.task_id,
                        t.tasks.c.state == TaskState.QUEUED.value,
                    )
                    .values(
                        state=TaskState.RUNNING.value,
                        attempt=t.tasks.c.attempt + 1,
                        pilot_id=pilot_id,
                    )
                )
                if taken.rowcount == 1:
                    break
                # Another TQ process on this database assigned (or finished) it first.
                self.matcher.remove_task(choice.task_id)
            values.update(state=PilotState.BUSY.value, task_id=choice.task_id)
            conn.execute(t.pilots.update().where(t.pilots.c.id == pilot_id).values(values))
            task = conn.execute(sa.select(t.tasks).where(t.tasks.c.id == choice.task_id)).one()
        self.matcher.remove_task(choice.task_id)
        self.matcher.set_idle(pilot_id, False)
        return _assignment(task, choice.hits)

    def heartbeat(self, pilot_id: int, cached: Sequence[str] | None = None) -> HeartbeatAnswer:
        """Seed IV-D: the pilot is alive; answer the other live pilots on its host."""
        now = self.clock()
        with self._lock, self._tx() as conn:
            row = live_pilot(conn, pilot_id)
            conn.execute(
                t.pilots.update().where(t.pilots.c.id == pilot_id).values(_seen(now, cached))
            )
            others = _neighbours(conn, row)
        if cached is not None:
            self.matcher.set_cache(pilot_id, cached)
        return HeartbeatAnswer(others)

    def deregister(self, pilot_id: int) -> None:
        """The pilot leaves (on exit or SIGTERM); a task it still held goes back to the queue."""
        self._retire([pilot_id], PilotState.GONE)

    def reap(self) -> list[int]:
        """Pilots whose heartbeat lapsed or whose life ended: lost, their tasks requeued."""
        now = self.clock()
        with self._lock, self._tx() as conn:
            lapsed = list(
                conn.execute(
                    sa.select(t.pilots.c.id).where(
                        t.pilots.c.state.in_(ACTIVE),
                        sa.or_(
                            t.pilots.c.last_seen < now - self.heartbeat_timeout,
                            t.pilots.c.expires_at < now - self.heartbeat_timeout,
                        ),
                    )
                ).scalars()
            )
        if lapsed:
            self._retire(lapsed, PilotState.LOST)
        return lapsed

    def _retire(self, pilot_ids: Sequence[int], state: PilotState) -> None:
        now = self.clock()
        requeued: list[QueuedTask] = []
        with self._lock, self._tx() as conn:
            for pilot_id in pilot_ids:
                row = locked_pilot(conn, pilot_id)
                if row is None:
                    raise TaskQueueNotFound(f"no pilot {pilot_id}")
                if row.state not in ACTIVE:
                    continue
                running = conn.execute(
                    sa.select(t.tasks).where(
                        t.tasks.c.pilot_id == pilot_id, t.tasks.c.state == TaskState.RUNNING.value
                    )
                ).all()
                for task in running:
                    conn.execute(
                        t.tasks.update()
                        .where(t.tasks.c.id == task.id)
                        .values(state=TaskState.QUEUED.value, pilot_id=None, runnable_since=now)
                    )
                    requeued.append(reread_queued(conn, task.id))
                conn.execute(
                    t.pilots.update()
                    .where(t.pilots.c.id == pilot_id)
                    .values(state=state.value, task_id=None, last_seen=now)
                )
        for pilot_id in pilot_ids:
            self.matcher.remove_pilot(pilot_id)
        for item in requeued:
            self.admit_task(item)


def _seen(now: float, cached: Sequence[str] | None) -> dict[str, Any]:
    """The pilot row's update for a call from it: seen now, and its cache list if it sent one."""
    values: dict[str, Any] = {"last_seen": now}
    if cached is not None:
        values["cached"] = cached_json(cached)
    return values


def _neighbours(conn: Connection, row: Any) -> tuple[Neighbour, ...]:
    query = sa.select(t.pilots.c.id, t.pilots.c.cache_dir).where(
        t.pilots.c.host == row.host, t.pilots.c.state.in_(ACTIVE), t.pilots.c.id != row.id
    )
    return tuple(Neighbour(r.id, r.cache_dir) for r in conn.execute(query))


def _assignment(task: Any, hits: int) -> Assignment:
    return Assignment(
        task_id=task.id,
        attempt=task.attempt,
        name=task.name,
        command=task.command,
        inputs=tuple(json.loads(task.inputs)),
        outputs=tuple(json.loads(task.outputs)),
        max_runtime=json.loads(task.spec)["max_runtime"],
        cached_inputs=hits,
    )
