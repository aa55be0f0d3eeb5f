"""The pilot protocol's life cycle (Hasham 2011 §IV, IV-D, IV-E): register, request, heartbeat,
leave.

A task is handed out by a conditional update (``state = 'queued'``) of a row no other
transaction holds (``SKIP LOCKED``): of two TQ processes on one database choosing the same task,
the second skips it at once (or, if the first has committed, updates nothing) and takes its next
best candidate in the same statement (on PostgreSQL a take is offered several).
The pilot's row is locked first in every operation, so a reaper in another process cannot
requeue a task while it is being assigned.  A pilot that leaves or is lost gives its running task
back to the queue.  The completion report is in
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
from glidein_ext.tq.client.protocol import (
    Assignment,
    HeartbeatAnswer,
    Neighbour,
    RegisterAnswer,
    Registration,
)
from glidein_ext.tq.models import PilotInfo, PilotState, QueuedTask, TaskState
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.matcher import pilot_ad
from glidein_ext.tq.service.store.core import (
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

# Tasks one take may choose among on PostgreSQL: the instances of a pool hold the same queue, and
# their best choices for pilots alike are the same tasks.
TAKE_CANDIDATES = 8


class PilotProtocol(StoreCore):
    """The pilots' side of the store; every method is one transaction, the matcher after it."""

    def register(self, reg: Registration, credential_id: int | None = None) -> RegisterAnswer:
        """A new pilot: its id, the heartbeat it owes, and the other pilots on its host (IV-D).
        ``credential_id``: the credential it registers with (None: the shared pilot token)."""
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
                    credential_id=credential_id,
                )
            )
            pilot_id = inserted_id(inserted)
            if reg.batch_id:
                conn.execute(
                    t.submissions.update()
                    .where(
                        t.submissions.c.batch_id == reg.batch_id,
                        t.submissions.c.site == reg.site,
                    )
                    .values(state="registered")
                )
            row = conn.execute(sa.select(t.pilots).where(t.pilots.c.id == pilot_id)).one()
            others = _neighbours(conn, row)
        with self._lock:  # the matcher: the pool's listener updates it too (tq.service.notify)
            self.matcher.add_pilot(pilot_info(row))  # its ad was built above: it cannot fail
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
            # A pool's instances hold the same queue: offer the take several candidates, so
            # that one another instance is taking at this moment costs no second round.
            several = TAKE_CANDIDATES if conn.dialect.name == "postgresql" else 1
            while True:
                choices = self.matcher.choose_several(pilot_id, now, several)
                if not choices:
                    values.update(state=PilotState.IDLE.value, task_id=None)
                    conn.execute(t.pilots.update().where(t.pilots.c.id == pilot_id).values(values))
                    self.matcher.set_idle(pilot_id, True)
                    return None
                won = _take(conn, [c.task_id for c in choices], pilot_id)
                if won is not None:
                    choice = next(c for c in choices if c.task_id == won)
                    break
                # Other TQ processes on this database assigned (or finished) them first, or are
                # taking them now (their rows are locked: skipped, not waited for).
                for lost in choices:
                    self.matcher.remove_task(lost.task_id)
            values.update(state=PilotState.BUSY.value, task_id=choice.task_id)
            conn.execute(t.pilots.update().where(t.pilots.c.id == pilot_id).values(values))
            task = conn.execute(sa.select(t.tasks).where(t.tasks.c.id == choice.task_id)).one()
        with self._lock:
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
            with self._lock:
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
        with self._lock:
            for pilot_id in pilot_ids:
                self.matcher.remove_pilot(pilot_id)
            for item in requeued:
                self.admit_task(item)


def _take(conn: Connection, task_ids: Sequence[int], pilot_id: int) -> int | None:
    """Seed 002's take: the first of ``task_ids`` (best first) that is still queued and whose
    row no other transaction holds becomes this pilot's; its id, or None.  ``FOR UPDATE SKIP
    LOCKED``: an instance of a pool never queues behind another taking the same task (SQLite has
    one writer and no row locks).  Two instances can never both win: the update is conditional
    on ``state = 'queued'``."""
    free = t.tasks.alias("free")
    preference = sa.case({task_id: rank for rank, task_id in enumerate(task_ids)}, value=free.c.id)
    unclaimed = (
        sa.select(free.c.id)
        # coalesce(): the way in is the candidates' ids (the primary key); a plain state test
        # leads PostgreSQL, while a new workflow's statistics are young, to the state index and
        # a scan of every queued task.
        .where(free.c.id.in_(task_ids))
        .where(sa.func.coalesce(free.c.state, "") == TaskState.QUEUED.value)
        .order_by(preference)
        .limit(1)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    taken = conn.execute(
        t.tasks.update()
        .where(t.tasks.c.id == unclaimed, t.tasks.c.state == TaskState.QUEUED.value)
        .values(state=TaskState.RUNNING.value, attempt=t.tasks.c.attempt + 1, pilot_id=pilot_id)
        .returning(t.tasks.c.id)
    ).scalar_one_or_none()
    return None if taken is None else int(taken)


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
    spec = json.loads(task.spec)
    return Assignment(
        task_id=task.id,
        attempt=task.attempt,
        name=task.name,
        command=task.command,
        inputs=tuple(json.loads(task.inputs)),
        outputs=tuple(json.loads(task.outputs)),
        max_runtime=spec["max_runtime"],
        cached_inputs=hits,
        request_cpus=spec.get("request_cpus", 1),
        request_memory=spec.get("request_memory", 0),
        request_disk=spec.get("request_disk", 0),
    )
