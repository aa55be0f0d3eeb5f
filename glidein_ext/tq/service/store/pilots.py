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
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from glidein_ext.errors import TaskQueueNotFound, TaskQueueRequestError
from glidein_ext.tq.client.protocol import (
    MAX_NEEDED_CACHED,
    HeartbeatAnswer,
    Neighbour,
    RegisterAnswer,
    Registration,
    TaskAssignment,
)
from glidein_ext.tq.models import PilotState, QueuedTask, TaskState
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.matching.match_groups import pilot_ad
from glidein_ext.tq.service.store.core import (
    ACTIVE,
    StoreCore,
    Tx,
    ad_problem,
    cached_json,
    inserted_id,
    live_pilot,
    locked_pilot,
    pilot_info,
    reread_queued,
)
from glidein_ext.tq.service.store.direct import run
from glidein_ext.tq.service.store.statements import (
    constant_in,
    insert_row,
    row_by_id,
    update_row,
)

# Tasks one take may choose among on PostgreSQL: the instances of a pool hold the same queue, and
# their best choices for pilots alike are the same tasks.
TAKE_CANDIDATES = 8


class PilotProtocol:
    """The pilots' side of the store: each method works in the caller's transaction, the matcher
    after its commit."""

    def __init__(self, core: StoreCore) -> None:
        self.core = core

    def register(self, tx: Tx, reg: Registration, credential_id: int | None) -> RegisterAnswer:
        """A new pilot: its id, the heartbeat it owes, and the other pilots on its host (IV-D).
        ``credential_id``: the credential it registers with (None: the shared pilot token)."""
        now = self.core.clock()
        values = dict(
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
        # the pilot as the matcher will hold it, its ad checked before anything is stored
        problem = ad_problem(
            functools.partial(pilot_ad, pilot_info(SimpleNamespace(id=0, **values)))
        )
        if problem is not None:
            raise TaskQueueRequestError(f"pilot registration {problem}")
        conn = tx.conn
        pilot_id = inserted_id(insert_row(conn, t.pilots, values))
        if reg.batch_id:
            conn.execute(
                t.submissions.update()
                .where(
                    t.submissions.c.batch_id == reg.batch_id,
                    t.submissions.c.site == reg.site,
                )
                .values(state="registered")
            )
        # the row as stored (its values above): not read again
        row = SimpleNamespace(id=pilot_id, **values)
        others = _neighbours(conn, row)
        # its ad was built above: it cannot fail
        tx.after_commit(functools.partial(self.core.matcher.add_pilot, pilot_info(row)))
        return RegisterAnswer(
            pilot_id=pilot_id,
            heartbeat_interval=self.core.heartbeat_interval,
            architecture=self.core.default_architecture.value,
            others=others,
        )

    def request(
        self,
        tx: Tx,
        pilot_id: int,
        cached: Sequence[str] | None,
        *,
        row: Any = None,
        pending: Mapping[str, Any] | None = None,
    ) -> TaskAssignment | None:
        """Hasham 2011 §IV-E: match the pilot to its best task and assign it; None when nothing
        fits.  ``row``: the pilot's live row, read and locked in this transaction already (not
        read again), with ``pending``, the values this transaction still has to write to it:
        written with the request's own update (one update of the row, not two).  Raises
        TaskQueueNotFound before it writes anything."""
        now = self.core.clock()
        conn = tx.conn
        if row is None:
            row = live_pilot(conn, pilot_id)
        if self.core.matcher.pilot(pilot_id) is None and not self.core.admit_pilot(row):
            raise TaskQueueNotFound(f"pilot {pilot_id} cannot be matched (see /healthz)")
        values = {**(pending or {}), **_seen(now, cached)}
        if cached is not None:
            self.core.matcher.set_cache(pilot_id, cached)  # the choice below uses the new list
        if row.task_id is not None:
            # The pilot asks again while holding a task (it lost our answer): same task.
            task = row_by_id(conn, t.tasks, row.task_id)
            if task.state == TaskState.RUNNING.value and task.pilot_id == pilot_id:
                update_row(conn, t.pilots, pilot_id, values)
                return _assignment(task, hits=0)
        # A pool's instances hold the same queue: offer the take several candidates, so
        # that one another instance is taking at this moment costs no second round.
        several = TAKE_CANDIDATES if conn.dialect.name == "postgresql" else 1
        held = tx.taken  # by this transaction's earlier requests: not offered again
        while True:
            choices = self.core.matcher.choose_several(pilot_id, now, several + len(held))
            if held:
                choices = [c for c in choices if c.task_id not in held][:several]
            if not choices:
                values.update(state=PilotState.IDLE.value, task_id=None)
                update_row(conn, t.pilots, pilot_id, values)
                self.core.matcher.set_idle(pilot_id, True)
                return None
            task = _take(conn, [c.task_id for c in choices], pilot_id)
            if task is not None:
                choice = next(c for c in choices if c.task_id == task.id)
                break
            # Other TQ processes on this database assigned (or finished) them first, or are
            # taking them now (their rows are locked: skipped, not waited for).
            for lost in choices:
                self.core.matcher.remove_task(lost.task_id)
        values.update(state=PilotState.BUSY.value, task_id=choice.task_id)
        update_row(conn, t.pilots, pilot_id, values)
        held.add(choice.task_id)

        def taken() -> None:
            self.core.matcher.remove_task(choice.task_id)
            self.core.matcher.set_idle(pilot_id, False)

        tx.after_commit(taken)
        return _assignment(task, choice.hits)

    def heartbeat(self, tx: Tx, pilot_id: int, cached: Sequence[str] | None) -> HeartbeatAnswer:
        """Hasham 2011 §IV-D: the pilot is alive; answer the other live pilots on its host."""
        now = self.core.clock()
        conn = tx.conn
        row = live_pilot(conn, pilot_id)
        update_row(conn, t.pilots, pilot_id, _seen(now, cached))
        others = _neighbours(conn, row)
        if cached is not None:
            tx.after_commit(functools.partial(self.core.matcher.set_cache, pilot_id, cached))
        # What vacating the pilot would cost (CACHED_INPUT_NEEDED_MB): its cached files that
        # queued tasks read, from the matcher's input index (no query).
        needed = self.core.matcher.needed_cached(pilot_id, MAX_NEEDED_CACHED, cached)
        return HeartbeatAnswer(others, needed)

    def deregister(self, tx: Tx, pilot_id: int) -> None:
        """The pilot leaves (on exit or SIGTERM); a task it still held goes back to the queue."""
        self.retire(tx, [pilot_id], PilotState.GONE)

    def reap(self, tx: Tx) -> list[int]:
        """Pilots whose heartbeat lapsed or whose life ended: lost, their tasks requeued."""
        now = self.core.clock()
        timeout = self.core.heartbeat_timeout
        lapsed = list(
            tx.conn.execute(
                sa.select(t.pilots.c.id).where(
                    t.pilots.c.state.in_(ACTIVE),
                    sa.or_(
                        t.pilots.c.last_seen < now - timeout,
                        t.pilots.c.expires_at < now - timeout,
                    ),
                )
            ).scalars()
        )
        if lapsed:
            self.retire(tx, lapsed, PilotState.LOST)
        return lapsed

    def retire(self, tx: Tx, pilot_ids: Sequence[int], state: PilotState) -> None:
        """The pilots leave (``state``: gone or lost); the tasks they held go back to the queue."""
        now = self.core.clock()
        requeued: list[QueuedTask] = []
        conn = tx.conn
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

        def retired() -> None:
            for pilot_id in pilot_ids:
                self.core.matcher.remove_pilot(pilot_id)
            for item in requeued:
                self.core.admit_task(item)

        tx.after_commit(retired)


def _take(conn: Connection, task_ids: Sequence[int], pilot_id: int) -> Any:
    """Lee 2003's take: the first of ``task_ids`` (best first) that is still queued and whose
    row no other transaction holds becomes this pilot's; its row as the assignment needs it
    (``RETURNING``: not read again), or None.  ``FOR UPDATE SKIP
    LOCKED``: an instance of a pool never queues behind another taking the same task (SQLite has
    one writer and no row locks).  Two instances can never both win: the update is conditional
    on ``state = 'queued'``."""
    params: dict[str, Any] = {f"c{rank}": task_id for rank, task_id in enumerate(task_ids)}
    params["pilot"] = pilot_id
    if conn.dialect.name == "sqlite" and len(task_ids) == 1:
        # One writer, no row locks: the same take without the candidates' subquery.
        return run(conn, TAKE_ONE, params).one_or_none()
    return run(conn, _take_statement(len(task_ids)), params).one_or_none()


@functools.lru_cache(maxsize=TAKE_CANDIDATES)
def _take_statement(count: int) -> sa.Update:
    """``_take``'s statement for ``count`` candidates (bound ``c0``.. best first, and
    ``pilot``), built once: building it costs more than running it."""
    free = t.tasks.alias("free")
    candidates = [sa.bindparam(f"c{rank}", type_=sa.BigInteger) for rank in range(count)]
    preference = sa.case(*((free.c.id == c, rank) for rank, c in enumerate(candidates)))
    unclaimed = (
        sa.select(free.c.id)
        # coalesce(): the way in is the candidates' ids (the primary key); a plain state test
        # leads PostgreSQL, while a new workflow's statistics are young, to the state index and
        # a scan of every queued task.
        .where(free.c.id.in_(candidates))
        .where(sa.func.coalesce(free.c.state, "") == TaskState.QUEUED.value)
        .order_by(preference)
        .limit(1)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    return (
        t.tasks.update()
        .where(t.tasks.c.id == unclaimed, t.tasks.c.state == TaskState.QUEUED.value)
        .values(
            state=TaskState.RUNNING.value,
            attempt=t.tasks.c.attempt + 1,
            pilot_id=sa.bindparam("pilot", type_=sa.BigInteger),
        )
        .returning(*(t.tasks.c[name] for name in _ASSIGNED))
    )


# The task's columns an assignment carries (``_assignment``).
_ASSIGNED = ("id", "attempt", "name", "command", "inputs", "outputs", "spec")
# ``_take`` of one candidate on SQLite, and the master's take of a pair's task (``master``):
# conditional on ``state = 'queued'`` as the general one
TAKE_ONE = (
    t.tasks.update()
    .where(
        t.tasks.c.id == sa.bindparam("c0", type_=sa.BigInteger),
        t.tasks.c.state == TaskState.QUEUED.value,
    )
    .values(
        state=TaskState.RUNNING.value,
        attempt=t.tasks.c.attempt + 1,
        pilot_id=sa.bindparam("pilot", type_=sa.BigInteger),
    )
    .returning(*(t.tasks.c[name] for name in _ASSIGNED))
)


def _seen(now: float, cached: Sequence[str] | None) -> dict[str, Any]:
    """The pilot row's update for a call from it: seen now, and its cache list if it sent one."""
    values: dict[str, Any] = {"last_seen": now}
    if cached is not None:
        values["cached"] = cached_json(cached)
    return values


def _neighbours(conn: Connection, row: Any) -> tuple[Neighbour, ...]:
    found = run(conn, _NEIGHBOURS, {"host": row.host, "pilot": row.id})
    return tuple(Neighbour(r.id, r.cache_dir) for r in found)


# built once: building a statement costs more than running it (``statements``)
_NEIGHBOURS = sa.select(t.pilots.c.id, t.pilots.c.cache_dir).where(
    t.pilots.c.host == sa.bindparam("host"),
    constant_in(t.pilots.c.state, ACTIVE),
    t.pilots.c.id != sa.bindparam("pilot"),
)


def _assignment(task: Any, hits: int) -> TaskAssignment:
    spec = json.loads(task.spec)
    return TaskAssignment(
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
