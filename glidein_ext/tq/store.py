"""The Task Queue's state: the database (every change committed first) and the matcher in memory.

Each operation of the pilot protocol (seed 001 IV, IV-D, IV-E) is one transaction; the in-memory
Matcher is updated only after the commit and is rebuilt from the database at start, so a TQ killed
at any moment loses no task.  Completions are keyed by (task, attempt): a repeated or stale report
is answered but never counted twice.  One lock serialises the operations of one TQ process.

Several TQ processes may share one PostgreSQL database, each with its own matcher.  A task is handed
out by a conditional update (``state = 'queued'``): of two processes choosing the same task, the
second blocks on the row until the first commits, then updates nothing and chooses again.  Pilot
rows are locked (``SELECT ... FOR UPDATE``) before task rows in every operation, so a reaper in
another process cannot requeue a task while it is being assigned, and a repeated completion sent
through two processes is counted once.  SQLite ignores the row locks (it has one writer anyway).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from glidein_ext.classads import Scalar
from glidein_ext.errors import TaskQueueError, TaskQueueNotFound, WorkflowError
from glidein_ext.tq import tables as t
from glidein_ext.tq.matcher import Matcher
from glidein_ext.tq.models import CacheMode, MatchSpec, PilotInfo, PilotState, QueuedTask, TaskState
from glidein_ext.tq.workflow import WorkflowDef

ACTIVE = (PilotState.IDLE.value, PilotState.BUSY.value)


@dataclass(frozen=True)
class Registration:
    """What a pilot sends at registration (seed IV-E: Host, SE, TTL, resources)."""

    site: str
    host: str
    se: str = ""
    cpus: int = 1
    memory: int = 0
    disk: int = 0
    ttl: int | None = None  # seconds of life left; None: unlimited (the seed's Tier0 pilots)
    attributes: dict[str, Scalar] = field(default_factory=dict)
    requirements: str = "true"
    rank: str = "0"
    cache_dir: str = ""
    cached: tuple[str, ...] = ()
    batch_id: str | None = None


def _spec(row: Any) -> MatchSpec:
    raw = json.loads(row.spec)
    raw["attributes"] = tuple(tuple(item) for item in raw["attributes"])
    return MatchSpec(**raw)


def _spec_json(spec: MatchSpec) -> str:
    return json.dumps(asdict(spec), separators=(",", ":"))


class Store:
    """The TQ state machine over a database; every public method is one transaction."""

    def __init__(
        self,
        engine: Engine,
        *,
        wait_for_data: float = 60.0,
        heartbeat_timeout: float = 120.0,
        cache_mode: CacheMode = CacheMode.PRE_DHT,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.engine = engine
        self.heartbeat_timeout = heartbeat_timeout
        self.cache_mode = cache_mode
        self.clock = clock
        self.matcher = Matcher(wait_for_data)
        self._lock = threading.RLock()

    # --- start-up ---

    def load(self) -> None:
        """Rebuild the matcher from the database; live pilots get a fresh heartbeat grace."""
        now = self.clock()
        with self._lock, self._tx() as conn:
            conn.execute(
                t.pilots.update()
                .where(t.pilots.c.state.in_(ACTIVE), t.pilots.c.last_seen < now)
                .values(last_seen=now)
            )
            for row in conn.execute(sa.select(t.pilots).where(t.pilots.c.state.in_(ACTIVE))):
                self.matcher.add_pilot(self._pilot_info(row))
            for row in conn.execute(
                sa.select(t.tasks).where(t.tasks.c.state == TaskState.QUEUED.value)
            ):
                self.matcher.add_task(self._queued(row))

    def _tx(self) -> Any:
        return _Transaction(self.engine)

    @staticmethod
    def _queued(row: Any) -> QueuedTask:
        return QueuedTask(
            row.id, _spec(row), tuple(json.loads(row.inputs)), row.priority, row.runnable_since or 0
        )

    @staticmethod
    def _pilot_info(row: Any) -> PilotInfo:
        return PilotInfo(
            pilot_id=row.id,
            site=row.site,
            host=row.host,
            se=row.se,
            cpus=row.cpus,
            memory=row.memory,
            disk=row.disk,
            expires_at=row.expires_at,
            attributes=json.loads(row.attributes),
            requirements=row.requirements,
            rank=row.rank,
            idle=row.state == PilotState.IDLE.value,
            cached=set(json.loads(row.cached)),
        )

    # --- workflows ---

    def submit(self, workflow: WorkflowDef) -> int:
        """Insert a whole workflow in one transaction; WorkflowError and nothing stored if bad."""
        now = self.clock()
        with self._lock, self._tx() as conn:
            wanted = (
                set(workflow.external_inputs)
                | set(workflow.available)
                | {lfn for task in workflow.tasks for lfn in task.outputs}
            )
            existing = self._existing_files(conn, wanted)
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
            wf_id = conn.execute(
                sa.insert(t.workflows).values(name=workflow.name, submitted_at=now)
            ).inserted_primary_key[0]
            rows = []
            for task in workflow.tasks:
                ready = not task.after and all(lfn in have for lfn in task.inputs)
                rows.append(
                    {
                        "workflow_id": wf_id,
                        "name": task.name,
                        "step": task.step,
                        "command": task.command,
                        "spec": _spec_json(task.spec),
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
        return int(wf_id)

    @staticmethod
    def _existing_files(conn: Connection, lfns: Iterable[str]) -> set[str]:
        found: set[str] = set()
        wanted = list(lfns)
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            found.update(
                conn.execute(sa.select(t.files.c.lfn).where(t.files.c.lfn.in_(chunk))).scalars()
            )
        return found

    # --- the pilot protocol ---

    def register(self, reg: Registration) -> dict[str, Any]:
        """A new pilot: its id, the heartbeat it owes, and the other pilots on its host (IV-D)."""
        now = self.clock()
        with self._lock, self._tx() as conn:
            pilot_id = conn.execute(
                sa.insert(t.pilots).values(
                    site=reg.site,
                    host=reg.host,
                    se=reg.se,
                    cpus=reg.cpus,
                    memory=reg.memory,
                    disk=reg.disk,
                    expires_at=None if reg.ttl is None else now + reg.ttl,
                    attributes=json.dumps(reg.attributes),
                    requirements=reg.requirements,
                    rank=reg.rank,
                    cache_dir=reg.cache_dir,
                    cached=json.dumps(sorted(reg.cached)),
                    batch_id=reg.batch_id,
                    state=PilotState.IDLE.value,
                    registered_at=now,
                    last_seen=now,
                )
            ).inserted_primary_key[0]
            if reg.batch_id:
                conn.execute(
                    t.submissions.update()
                    .where(t.submissions.c.batch_id == reg.batch_id)
                    .values(state="registered")
                )
            row = conn.execute(sa.select(t.pilots).where(t.pilots.c.id == pilot_id)).one()
            others = self._neighbours(conn, row)
        self.matcher.add_pilot(self._pilot_info(row))
        return {"pilot_id": int(pilot_id), "others": others}

    def _neighbours(self, conn: Connection, row: Any) -> list[dict[str, Any]]:
        query = sa.select(t.pilots.c.id, t.pilots.c.cache_dir).where(
            t.pilots.c.host == row.host, t.pilots.c.state.in_(ACTIVE), t.pilots.c.id != row.id
        )
        return [{"pilot_id": r.id, "cache_dir": r.cache_dir} for r in conn.execute(query)]

    def _live_pilot(self, conn: Connection, pilot_id: int) -> Any:
        row = conn.execute(
            sa.select(t.pilots).where(t.pilots.c.id == pilot_id).with_for_update()
        ).one_or_none()
        if row is None or row.state not in ACTIVE:
            state = "unknown" if row is None else row.state
            raise TaskQueueNotFound(f"pilot {pilot_id} is {state}")
        return row

    def request(self, pilot_id: int, cached: Sequence[str] | None = None) -> dict[str, Any] | None:
        """Seed IV-E: match the pilot to its best task and assign it; None when nothing fits."""
        now = self.clock()
        with self._lock, self._tx() as conn:
            row = self._live_pilot(conn, pilot_id)
            values: dict[str, Any] = {"last_seen": now}
            if cached is not None:
                values["cached"] = json.dumps(sorted(set(cached)))
                self.matcher.set_cache(pilot_id, cached)
            if row.task_id is not None:
                # The pilot asks again while holding a task (it lost our answer): same task.
                task = conn.execute(sa.select(t.tasks).where(t.tasks.c.id == row.task_id)).one()
                if task.state == TaskState.RUNNING.value and task.pilot_id == pilot_id:
                    conn.execute(t.pilots.update().where(t.pilots.c.id == pilot_id).values(values))
                    return self._assignment(task, hits=0)
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
        return self._assignment(task, choice.hits)

    @staticmethod
    def _assignment(task: Any, hits: int) -> dict[str, Any]:
        return {
            "task_id": task.id,
            "attempt": task.attempt,
            "name": task.name,
            "command": task.command,
            "inputs": json.loads(task.inputs),
            "outputs": json.loads(task.outputs),
            "max_runtime": json.loads(task.spec)["max_runtime"],
            "cached_inputs": hits,
        }

    def heartbeat(self, pilot_id: int, cached: Sequence[str] | None = None) -> dict[str, Any]:
        """Seed IV-D: the pilot is alive; answer the other live pilots on its host."""
        now = self.clock()
        with self._lock, self._tx() as conn:
            row = self._live_pilot(conn, pilot_id)
            values: dict[str, Any] = {"last_seen": now}
            if cached is not None:
                values["cached"] = json.dumps(sorted(set(cached)))
            conn.execute(t.pilots.update().where(t.pilots.c.id == pilot_id).values(values))
            others = self._neighbours(conn, row)
        if cached is not None:
            self.matcher.set_cache(pilot_id, cached)
        return {"others": others}

    def complete(
        self,
        pilot_id: int,
        task_id: int,
        attempt: int,
        exit_code: int,
        outputs: Sequence[str],
        report: str = "",
    ) -> dict[str, Any]:
        """A task's end; idempotent: a repeated or stale report is answered, never counted twice."""
        now = self.clock()
        newly_queued: list[QueuedTask] = []
        with self._lock, self._tx() as conn:
            conn.execute(
                sa.select(t.pilots.c.id).where(t.pilots.c.id == pilot_id).with_for_update()
            ).all()
            task = conn.execute(
                sa.select(t.tasks).where(t.tasks.c.id == task_id).with_for_update()
            ).one_or_none()
            if task is None:
                raise TaskQueueNotFound(f"no task {task_id}")
            seen = conn.execute(
                sa.select(t.completions.c.ok).where(
                    t.completions.c.task_id == task_id, t.completions.c.attempt == attempt
                )
            ).one_or_none()
            if seen is not None:
                return {"accepted": False, "duplicate": True, "state": task.state}
            current = (
                task.state == TaskState.RUNNING.value
                and task.attempt == attempt
                and task.pilot_id == pilot_id
            )
            if not current:
                return {"accepted": False, "duplicate": False, "state": task.state}
            declared = json.loads(task.outputs)
            ok = exit_code == 0 and set(declared) <= set(outputs)
            conn.execute(
                sa.insert(t.completions).values(
                    task_id=task_id,
                    attempt=attempt,
                    pilot_id=pilot_id,
                    exit_code=exit_code,
                    ok=int(ok),
                    at=now,
                )
            )
            pilot_values: dict[str, Any] = {
                "state": PilotState.IDLE.value,
                "task_id": None,
                "last_seen": now,
            }
            if ok:
                conn.execute(
                    t.tasks.update()
                    .where(t.tasks.c.id == task_id)
                    .values(
                        state=TaskState.DONE.value,
                        exit_code=exit_code,
                        report=report[:4000],
                        finished_at=now,
                    )
                )
                if declared:
                    conn.execute(
                        sa.insert(t.files),
                        [
                            {"lfn": lfn, "produced_by": task_id, "created_at": now}
                            for lfn in declared
                        ],
                    )
                newly_queued = self._release(conn, task_id, declared, now)
                if self.cache_mode is CacheMode.PRE_DHT and declared:
                    prow = conn.execute(
                        sa.select(t.pilots.c.cached).where(t.pilots.c.id == pilot_id)
                    ).one()
                    pilot_values["cached"] = json.dumps(
                        sorted({*json.loads(prow.cached), *declared})
                    )
                state = TaskState.DONE
            else:
                failures = task.failures + 1
                state = TaskState.FAILED if failures > task.max_retries else TaskState.QUEUED
                conn.execute(
                    t.tasks.update()
                    .where(t.tasks.c.id == task_id)
                    .values(
                        state=state.value,
                        failures=failures,
                        exit_code=exit_code,
                        report=report[:4000],
                        pilot_id=None,
                        finished_at=now if state is TaskState.FAILED else None,
                    )
                )
                if state is TaskState.QUEUED:
                    again = conn.execute(sa.select(t.tasks).where(t.tasks.c.id == task_id)).one()
                    newly_queued = [self._queued(again)]
            conn.execute(t.pilots.update().where(t.pilots.c.id == pilot_id).values(pilot_values))
        for item in newly_queued:
            self.matcher.add_task(item)
        self.matcher.set_idle(pilot_id, True)
        if ok and self.cache_mode is CacheMode.PRE_DHT:
            self.matcher.add_cached(pilot_id, declared)
        return {"accepted": True, "duplicate": False, "state": state.value}

    def _release(
        self, conn: Connection, done_id: int, outputs: Sequence[str], now: float
    ) -> list[QueuedTask]:
        """Waiting tasks that read these outputs or wait for this task, and are now runnable."""
        candidates: set[int] = set()
        for start in range(0, len(outputs), 500):
            chunk = list(outputs[start : start + 500])
            candidates.update(
                conn.execute(
                    sa.select(t.task_inputs.c.task_id).where(t.task_inputs.c.lfn.in_(chunk))
                ).scalars()
            )
        candidates.update(
            conn.execute(
                sa.select(t.task_after.c.task_id).where(t.task_after.c.after_id == done_id)
            ).scalars()
        )
        released: list[QueuedTask] = []
        for task_id in sorted(candidates):
            # Locked: of two completions (in two processes) providing its last inputs, the
            # second waits here and then sees the first's files.
            row = conn.execute(
                sa.select(t.tasks)
                .where(t.tasks.c.id == task_id, t.tasks.c.state == TaskState.WAITING.value)
                .with_for_update()
            ).one_or_none()
            if row is None:
                continue
            missing_inputs = conn.execute(
                sa.select(sa.func.count())
                .select_from(t.task_inputs.outerjoin(t.files, t.files.c.lfn == t.task_inputs.c.lfn))
                .where(t.task_inputs.c.task_id == task_id, t.files.c.lfn.is_(None))
            ).scalar_one()
            pending_after = conn.execute(
                sa.select(sa.func.count())
                .select_from(t.task_after.join(t.tasks, t.tasks.c.id == t.task_after.c.after_id))
                .where(t.task_after.c.task_id == task_id, t.tasks.c.state != TaskState.DONE.value)
            ).scalar_one()
            if missing_inputs or pending_after:
                continue
            conn.execute(
                t.tasks.update()
                .where(t.tasks.c.id == task_id)
                .values(state=TaskState.QUEUED.value, runnable_since=now)
            )
            row = conn.execute(sa.select(t.tasks).where(t.tasks.c.id == task_id)).one()
            released.append(self._queued(row))
        return released

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
                row = conn.execute(
                    sa.select(t.pilots).where(t.pilots.c.id == pilot_id).with_for_update()
                ).one_or_none()
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
                    again = conn.execute(sa.select(t.tasks).where(t.tasks.c.id == task.id)).one()
                    requeued.append(self._queued(again))
                conn.execute(
                    t.pilots.update()
                    .where(t.pilots.c.id == pilot_id)
                    .values(state=state.value, task_id=None, last_seen=now)
                )
        for pilot_id in pilot_ids:
            self.matcher.remove_pilot(pilot_id)
        for item in requeued:
            self.matcher.add_task(item)

    # --- PilotManager bookkeeping (seed IV-A) ---

    def record_submission(self, batch_id: str, site: str) -> None:
        with self._lock, self._tx() as conn:
            conn.execute(
                sa.insert(t.submissions).values(
                    batch_id=batch_id, site=site, submitted_at=self.clock(), state="inactive"
                )
            )

    def submissions(self, site: str) -> dict[str, str]:
        with self._tx() as conn:
            query = sa.select(t.submissions.c.batch_id, t.submissions.c.state).where(
                t.submissions.c.site == site
            )
            return {row[0]: row[1] for row in conn.execute(query)}

    def mark_vanished(self, batch_ids: Iterable[str]) -> None:
        with self._lock, self._tx() as conn:
            for batch_id in batch_ids:
                conn.execute(
                    t.submissions.update()
                    .where(
                        t.submissions.c.batch_id == batch_id, t.submissions.c.state == "inactive"
                    )
                    .values(state="vanished")
                )

    # --- status ---

    def status(self) -> dict[str, Any]:
        """Workflows with their tasks by state; pilots by site and state."""
        with self._tx() as conn:
            counts: dict[int, Counter[str]] = {}
            for wf_id, state, n in conn.execute(
                sa.select(t.tasks.c.workflow_id, t.tasks.c.state, sa.func.count()).group_by(
                    t.tasks.c.workflow_id, t.tasks.c.state
                )
            ):
                counts.setdefault(wf_id, Counter())[state] = n
            workflows = [
                {
                    "id": row.id,
                    "name": row.name,
                    "submitted_at": row.submitted_at,
                    "tasks": {s.value: counts.get(row.id, Counter())[s.value] for s in TaskState},
                }
                for row in conn.execute(sa.select(t.workflows).order_by(t.workflows.c.id))
            ]
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
            return {
                "workflows": workflows,
                "pilots": pilots,
                "completions": completions.scalar_one(),
                "queued_groups": self.matcher.group_count,
            }

    def site_view(self, site: str) -> dict[str, int]:
        """Counts for the PilotMonitor (seed IV-A): queued tasks, pilots by state at ``site``."""
        with self._tx() as conn:
            states = dict(
                conn.execute(
                    sa.select(t.pilots.c.state, sa.func.count())
                    .where(t.pilots.c.site == site)
                    .group_by(t.pilots.c.state)
                ).all()
            )
        inactive = sum(1 for state in self.submissions(site).values() if state == "inactive")
        return {
            "idle": states.get(PilotState.IDLE.value, 0),
            "busy": states.get(PilotState.BUSY.value, 0),
            "inactive": inactive,
        }

    def queued_groups_for(self, template: PilotInfo, now: float) -> list[int]:
        """Queued tasks per match group that a pilot like ``template`` could run."""
        with self._lock:
            return self.matcher.queued_groups_for(template, now)

    def task_rows(self) -> list[dict[str, Any]]:
        """Every task (for tests and `tq status --tasks`)."""
        with self._tx() as conn:
            return [dict(row._mapping) for row in conn.execute(sa.select(t.tasks))]


class _Transaction:
    """``with`` one database transaction; SQLAlchemy errors become TaskQueueError."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._cm: Any = None

    def __enter__(self) -> Connection:
        try:
            self._cm = self._engine.begin()
            conn: Connection = self._cm.__enter__()
        except SQLAlchemyError as exc:
            raise TaskQueueError(f"database unavailable: {exc}") from exc
        return conn

    def __exit__(self, *exc_info: Any) -> Literal[False]:
        try:
            self._cm.__exit__(*exc_info)
        except SQLAlchemyError as exc:
            raise TaskQueueError(f"database error: {exc}") from exc
        if exc_info[0] is not None and issubclass(exc_info[0], SQLAlchemyError):
            raise TaskQueueError(f"database error: {exc_info[1]}") from exc_info[1]
        return False
