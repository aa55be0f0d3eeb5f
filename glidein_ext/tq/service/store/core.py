"""What every part of the store shares: the database, the matcher, the one lock, the transaction.

``StoreCore`` holds the engine, the in-memory Matcher and the lock that serialises this TQ
process's operations, and runs one piece of work in one transaction: ``write`` (under the lock;
what the work left for after the commit, ``Tx.after_commit``, runs then, still under the lock)
or ``read``.  ``Transaction`` is the one way into the database (SQLAlchemy errors become
TaskQueueError).  The row readers turn database rows into the matcher's values.

Start-up never fails on one row: a row the matcher cannot take (stored by an older TQ that checked
less) is skipped, logged and kept in ``skipped`` (``/healthz`` shows it); its pilot is reaped as
usual, its task stays in the database for an operator to see.  What the store adds to the matcher
after a commit goes through the same door (``admit_task``), so a bad row never fails a call.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import KW_ONLY, InitVar, asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, CursorResult, Engine
from sqlalchemy.exc import SQLAlchemyError

from glidein_ext.errors import TaskQueueError, TaskQueueNotFound
from glidein_ext.tq.models import (
    Architecture,
    MatchSpec,
    PilotInfo,
    PilotState,
    QueuedTask,
    TaskState,
)
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.matching.matcher import Matcher
from glidein_ext.tq.service.store.statements import row_by_id

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

ACTIVE = (PilotState.IDLE.value, PilotState.BUSY.value)
CHUNK = 500  # values per IN (...) clause
log = logging.getLogger("glidein_ext.tq.service.store")
D = TypeVar("D", bound="DataclassInstance")
R = TypeVar("R")
V = TypeVar("V")


@dataclass(frozen=True)
class SkippedRow:
    """A database row the matcher could not take: which, and why (one short line)."""

    table: str
    id: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Tx:
    """One transaction's connection, and what the matcher and the counters learn once it has
    committed (``after_commit``: run in order, under the store's lock; never if it rolled back).
    ``taken``: the tasks it assigned, which the matcher still offers until then (a second
    request in the same transaction passes them by)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._after: list[Callable[[], None]] = []
        self.taken: set[int] = set()

    def after_commit(self, action: Callable[[], None]) -> None:
        self._after.append(action)

    def committed(self) -> None:
        for action in self._after:
            action()


class CoreOptions(TypedDict, total=False):
    """``StoreCore``'s keyword arguments, as ``Store`` takes them on (defaults: ``StoreCore``'s)."""

    wait_for_data: float
    heartbeat_timeout: float
    heartbeat_interval: int
    default_architecture: Architecture
    clock: Callable[[], float]


@dataclass(eq=False)
class StoreCore:
    """The state the store's parts share, and the one way to run work in a transaction."""

    engine: Engine
    _: KW_ONLY
    wait_for_data: InitVar[float] = 60.0  # the matcher's
    heartbeat_timeout: float = 120.0
    heartbeat_interval: int = 30
    default_architecture: Architecture = Architecture.PRE_DHT
    clock: Callable[[], float] = time.time
    matcher: Matcher = field(init=False)
    # The rows the matcher could not take, by (table, id).
    skipped: dict[tuple[str, int], SkippedRow] = field(default_factory=dict, init=False)
    lock: threading.RLock = field(default_factory=threading.RLock, init=False)
    # The connection the writes use, one at a time under the lock: kept, not checked out of
    # the pool (and, on PostgreSQL, pinged) per write, which cost a fifth of a call's store
    # time, measured.  One the database dropped is replaced at the next write.
    _writer: Connection | None = field(default=None, init=False)

    def __post_init__(self, wait_for_data: float) -> None:
        self.matcher = Matcher(wait_for_data)

    def write(self, work: Callable[[Tx], R]) -> R:
        """``work`` in one transaction, under the lock; then what it left for after the commit."""
        with self.lock:
            with Transaction(self.engine, self._writer_connection()) as conn:
                tx = Tx(conn)
                result = work(tx)
            tx.committed()
        return result

    def _writer_connection(self) -> Connection | None:
        """The kept connection; None (the pool's) for a write within a write."""
        conn = self._writer
        if conn is not None and conn.in_transaction():
            return None
        if conn is None or conn.invalidated or conn.closed:
            if conn is not None:
                conn.close()
            try:
                conn = self._writer = self.engine.connect()
            except SQLAlchemyError as exc:
                raise TaskQueueError(f"database unavailable: {exc}") from exc
        return conn

    def close(self) -> None:
        """Give the kept connection back (before the engine is disposed of)."""
        with self.lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None

    def read(self, work: Callable[[Connection], R]) -> R:
        """``work`` (which only reads) in one transaction, without the lock."""
        with Transaction(self.engine) as conn:
            return work(conn)

    def load(self, conn: Connection) -> None:
        """Rebuild the matcher from the database; live pilots get a fresh heartbeat grace.

        A row the matcher cannot take is skipped and reported (``skipped``), never fatal."""
        now = self.clock()
        conn.execute(
            t.pilots.update()
            .where(t.pilots.c.state.in_(ACTIVE), t.pilots.c.last_seen < now)
            .values(last_seen=now)
        )
        for row in conn.execute(sa.select(t.pilots).where(t.pilots.c.state.in_(ACTIVE))):
            self.admit_pilot(row)
        for row in conn.execute(
            sa.select(t.tasks).where(t.tasks.c.state == TaskState.QUEUED.value)
        ):
            self._admit("tasks", row.id, functools.partial(_add_task_row, self.matcher, row))

    def admit_pilot(self, row: Any) -> bool:
        """Hand a pilot's row to the matcher (a pilot registered through another TQ process on
        this database, or at start-up); False, and reported, if the matcher cannot take it."""
        self._admit("pilots", row.id, functools.partial(_add_pilot, self.matcher, row))
        return self.matcher.pilot(row.id) is not None

    def admit_task(self, task: QueuedTask) -> None:
        """Hand a committed queued task to the matcher; a task it cannot take is reported."""
        self._admit("tasks", task.task_id, functools.partial(self.matcher.add_task, task))

    def _admit(self, table: str, row_id: int, add: Callable[[], None]) -> None:
        try:
            add()
        except Exception as exc:  # noqa: BLE001 -- a row that cannot be loaded is skipped and reported: it must never stop the TQ
            if table == "pilots":
                self.matcher.remove_pilot(row_id)
            else:
                self.matcher.remove_task(row_id)
            reason = f"{type(exc).__name__}: {str(exc)[:200]}"
            log.error(
                "skipping %s row %d, which the matcher cannot take: %s", table, row_id, reason
            )
            self.skipped[(table, row_id)] = SkippedRow(table, row_id, reason)


class Transaction:
    """``with`` one database transaction, on ``connection`` or one of the pool's; SQLAlchemy
    errors become TaskQueueError."""

    def __init__(self, engine: Engine, connection: Connection | None = None) -> None:
        self._engine = engine
        self._connection = connection
        self._cm: Any = None

    def __enter__(self) -> Connection:
        try:
            if self._connection is not None:
                self._cm = self._connection.begin()
                self._cm.__enter__()
                return self._connection
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


# --- rows and the matcher's values ---


def ad_problem(build: Callable[[], object]) -> str | None:
    """Why the matcher could not build an ad (``build()`` raises), or None: checked before a
    pilot or a task is stored, so that nothing stored fails later."""
    try:
        build()
    except Exception as exc:  # noqa: BLE001 -- classad2 raises what it likes (SystemError for a big integer): the request is refused
        return f"cannot be matched: {type(exc).__name__}: {str(exc)[:200]}"
    return None


def _add_pilot(matcher: Matcher, row: Any) -> None:
    matcher.add_pilot(pilot_info(row))


def _add_task_row(matcher: Matcher, row: Any) -> None:
    matcher.add_task(queued_task(row))


def spec_of(row: Any) -> MatchSpec:
    raw = json.loads(row.spec)
    raw["attributes"] = tuple(tuple(item) for item in raw["attributes"])
    return MatchSpec(**raw)


def spec_json(spec: MatchSpec) -> str:
    return json.dumps(asdict(spec), separators=(",", ":"))


def queued_task(row: Any, since: float | None = None) -> QueuedTask:
    """The task as the matcher holds it; ``since``: when it became runnable, if the row was read
    before (the row's ``runnable_since`` otherwise)."""
    runnable = row.runnable_since if since is None else since
    return QueuedTask(
        row.id, spec_of(row), tuple(json.loads(row.inputs)), row.priority, runnable or 0
    )


@functools.cache
def _field_names(cls: type[DataclassInstance]) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls) if f.init)


def record(cls: type[D], row: Any, **computed: Any) -> D:
    """A ``cls`` dataclass from a row whose columns carry its fields' names; ``computed``: the
    fields the row holds otherwise (under another name, as JSON) or not at all."""
    read = {name: getattr(row, name) for name in _field_names(cls) if name not in computed}
    return cls(**read, **computed)


def pilot_info(row: Any) -> PilotInfo:
    return record(
        PilotInfo,
        row,
        pilot_id=row.id,
        attributes=json.loads(row.attributes),
        idle=row.state == PilotState.IDLE.value,
        cached=set(json.loads(row.cached)),
    )


def inserted_id(result: CursorResult[Any]) -> int:
    """The primary key of the row an INSERT just made."""
    key = result.inserted_primary_key
    if key is None:
        raise TaskQueueError("the database returned no id for a new row")
    return int(key[0])


def cached_json(cached: Iterable[str]) -> str:
    """The pilots.cached column: the TQ's view of a pilot's cache, sorted, no repeats."""
    return json.dumps(sorted(set(cached)))


def chunks(values: Sequence[V]) -> Iterable[list[V]]:
    """``values`` in lists of at most ``CHUNK``, one per ``IN (...)`` clause."""
    for start in range(0, len(values), CHUNK):
        yield list(values[start : start + CHUNK])


def locked_pilot(conn: Connection, pilot_id: int) -> Any:
    """The pilot's row, locked (pilot rows before task rows, always), or None."""
    return row_by_id(conn, t.pilots, pilot_id, locked=True)


def live_pilot(conn: Connection, pilot_id: int) -> Any:
    """The pilot's row, locked; TaskQueueNotFound unless it is idle or busy."""
    row = locked_pilot(conn, pilot_id)
    if row is None or row.state not in ACTIVE:
        state = "unknown" if row is None else row.state
        raise TaskQueueNotFound(f"pilot {pilot_id} is {state}")
    return row


def reread_queued(conn: Connection, task_id: int) -> QueuedTask:
    """A task just put back in the queue, as the matcher will hold it."""
    row = row_by_id(conn, t.tasks, task_id)
    if row is None:  # the caller's transaction has just written it
        raise TaskQueueNotFound(f"no task {task_id}")
    return queued_task(row)
