"""The request path's statements run on the DBAPI cursor, past SQLAlchemy's execution machinery.

A statement built once (``statements``) is still executed by SQLAlchemy through an execution
context, a compiled-cache lookup, parameter processing and a result object: about 15-30 us a
statement, measured, against the few us SQLite then takes (a pilot's call runs four).  ``run``
compiles a statement once per dialect (and, for an INSERT, per set of columns) and, when running
it needs nothing SQLAlchemy adds but the dialect's value conversions (applied here the same way,
found once), runs it on the transaction's own DBAPI connection: no list to expand, no column
default to fill in, an INSERT's new id from SQLite's ``lastrowid`` or the one-column ``RETURNING``
SQLAlchemy adds on PostgreSQL.  Anything else is ``conn.execute`` as before.  Same connection,
same transaction: nothing changes but the cost.  A driver's error becomes SQLAlchemy's
(``DBAPIError.instance``: IntegrityError stays IntegrityError), and a lost connection is
invalidated as SQLAlchemy would.
"""

from __future__ import annotations

import collections
import keyword
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ClauseElement


@dataclass
class _Plan:
    """A statement compiled for one dialect: its SQL, its parameters in order (None: by name),
    the values it binds itself, each parameter's conversion, and its rows' class (None: none)."""

    sql: str
    order: tuple[str, ...] | None
    defaults: dict[str, Any]  # the values bound in the statement itself (``state = 'queued'``)
    convert: dict[str, Callable[[Any], Any]]  # the dialect's bind processors (SQLite: to_float)
    row: Any  # a named tuple's class: a row by index or by name; None: no rows
    new_id: str  # an INSERT's new row id: "lastrowid" (SQLite), "returning" (PostgreSQL), "none"
    types: tuple[Any, ...] = ()  # the rows' columns' types
    # each column's result processor, found at the first run (they depend on the type the
    # driver reports: a PostgreSQL FLOAT needs none, a NUMERIC read as float one)
    processors: tuple[Callable[[Any], Any] | None, ...] | None = None

    def rows(self, cursor: Any, dialect: sa.Dialect, plain: bool = False) -> list[Any]:
        fetched = cursor.fetchall()
        if self.processors is None:
            self.processors = tuple(
                kind.dialect_impl(dialect).result_processor(dialect, described[1])
                for kind, described in zip(self.types, cursor.description, strict=True)
            )
        if not any(self.processors):
            return fetched if plain else list(map(self.row._make, fetched))
        convert = self.processors
        converted = (
            tuple(p(v) if p else v for p, v in zip(convert, r, strict=True)) for r in fetched
        )
        return list(converted) if plain else list(map(self.row._make, converted))

    def args(self, values: Mapping[str, Any]) -> Any:
        if self.defaults:
            values = {**self.defaults, **values}
        convert = self.convert
        if self.order is None:
            if not convert:
                return values
            return {k: convert[k](v) if k in convert else v for k, v in values.items()}
        if not convert:
            return tuple(values[name] for name in self.order)
        return tuple(
            convert[name](values[name]) if name in convert else values[name] for name in self.order
        )


class Ran:
    """What ``run`` returns: the rows read, or the statement's count and new row id; the part of
    SQLAlchemy's result the store uses."""

    __slots__ = ("_rows", "lastrowid", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int, lastrowid: int | None) -> None:
        self._rows = rows
        self.rowcount = rowcount
        self.lastrowid = lastrowid

    @property
    def inserted_primary_key(self) -> tuple[int | None]:
        return (self.lastrowid,)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)

    def all(self) -> list[Any]:
        return list(self._rows)

    def first(self) -> Any:
        return self._rows[0] if self._rows else None

    def one_or_none(self) -> Any:
        if len(self._rows) > 1:
            raise sa.exc.MultipleResultsFound("more than one row where one or none was expected")
        return self.first()

    def scalars(self) -> list[Any]:
        return [row[0] for row in self._rows]

    def scalar_one(self) -> Any:
        if len(self._rows) != 1:
            raise sa.exc.NoResultFound(f"{len(self._rows)} rows where exactly one was expected")
        return self._rows[0][0]


_NO_PLAN = object()  # a statement that runs through SQLAlchemy
_plans: dict[tuple[ClauseElement, str, tuple[str, ...]], object] = {}
_plans_lock = threading.Lock()


def run(
    conn: Connection,
    statement: Any,
    params: Mapping[str, Any] | None = None,
    *,
    plain: bool = False,
) -> Any:
    """``conn.execute(statement, params)``, on the DBAPI cursor where nothing is lost by it;
    ``plain``: its rows as plain tuples, by index only (a read of many rows: no named tuple
    made for each)."""
    values = params or {}
    plan = _plan_for(conn, statement, tuple(values) if isinstance(statement, sa.Insert) else ())
    if not isinstance(plan, _Plan):
        result = conn.execute(statement, dict(values))
        return Ran([tuple(r) for r in result], result.rowcount, None) if plain else result
    args = plan.args(values)
    raw = conn.connection.dbapi_connection
    assert raw is not None  # a connection in a transaction is checked out
    cursor = raw.cursor()
    try:
        cursor.execute(plan.sql, args)
        rows = plan.rows(cursor, conn.dialect, plain) if plan.row is not None else []
        new_id = None
        if plan.new_id == "lastrowid":
            new_id = cursor.lastrowid
        elif plan.new_id == "returning":
            returned = cursor.fetchone()
            new_id = returned[0] if returned is not None else None
        return Ran(rows, cursor.rowcount, new_id)
    except conn.dialect.loaded_dbapi.Error as exc:
        raise _translated(conn, exc, plan.sql, args, raw, cursor) from exc
    finally:
        cursor.close()


def _plan_for(conn: Connection, statement: Any, columns: tuple[str, ...]) -> object:
    key = (statement, conn.dialect.name, columns)
    plan = _plans.get(key)
    if plan is None:
        with _plans_lock:
            plan = _plans.setdefault(key, _plan(statement, conn.dialect, columns))
    return plan


def _plan(statement: Any, dialect: sa.Dialect, columns: tuple[str, ...]) -> object:
    """The statement's plan, or ``_NO_PLAN`` where SQLAlchemy must run it."""
    if not isinstance(statement, (sa.Select, sa.Update, sa.Insert, sa.Delete)):
        return _NO_PLAN
    compiled = statement.compile(dialect=dialect, column_keys=list(columns) or None)
    binds = compiled.binds.values()
    if any(b.expanding or b.literal_execute or b.callable is not None for b in binds):
        return _NO_PLAN
    if getattr(compiled, "escaped_bind_names", None):
        return _NO_PLAN
    if isinstance(statement, (sa.Insert, sa.Update)) and any(
        c.default is not None or c.onupdate is not None for c in statement.table.columns
    ):
        return _NO_PLAN  # a value SQLAlchemy would make for a column the call leaves out
    returns = statement.exported_columns  # a SELECT's columns, a RETURNING's
    new_id = ""
    if isinstance(statement, sa.Insert):
        new_id = _new_id(statement.table, compiled.string, dialect.name)
        if not new_id or len(returns) > 0:
            return _NO_PLAN  # an INSERT ... RETURNING what the caller reads: SQLAlchemy's
    row: Any = None
    if len(returns) > 0:  # (an INSERT's are SQLAlchemy's, above)
        names = tuple(str(name) for name in returns.keys())  # noqa: SIM118 -- the columns' keys
        if len(set(names)) != len(names) or not all(_field(n) for n in names):
            return _NO_PLAN
        row = collections.namedtuple("Row", names)  # type: ignore[misc,no-redef]
    order = tuple(compiled.positiontup) if compiled.positional and compiled.positiontup else None
    if compiled.positional and order is None and binds:
        return _NO_PLAN
    named = compiled.bind_names  # each parameter -> its name in the SQL
    defaults = {named[b]: b.effective_value for b in binds if not b.required and b in named}
    convert: dict[str, Callable[[Any], Any]] = {}
    for bind in binds:
        processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if processor is not None and bind in named:
            convert[named[bind]] = processor
    types = tuple(column.type for column in returns) if row is not None else ()
    return _Plan(compiled.string, order, defaults, convert, row, new_id, types)


def _new_id(table: Any, sql: str, dialect: str) -> str:
    """How an INSERT's new id is read: SQLite's ``lastrowid``, or the ``RETURNING`` of the one
    primary key column SQLAlchemy adds on PostgreSQL ("none" where it adds none: a composite
    key); "" for anything else (SQLAlchemy's)."""
    if " RETURNING " not in sql.upper():
        return "lastrowid" if dialect == "sqlite" else "none"
    keys = list(table.primary_key.columns)
    if len(keys) == 1 and sql.rstrip().endswith(f"RETURNING {table.name}.{keys[0].name}"):
        return "returning"
    return ""


def _field(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_")


def _translated(
    conn: Connection, exc: Any, sql: str, args: Any, raw: Any, cursor: Any
) -> sa.exc.StatementError:
    """The driver's error as SQLAlchemy's; a lost connection is invalidated, as SQLAlchemy
    does, so that the pool does not hand it out again."""
    dialect = conn.dialect
    lost = dialect.is_disconnect(exc, raw, cursor)
    if lost:
        conn.invalidate(exc)
    params: Sequence[Any] | Mapping[str, Any] = args
    error: sa.exc.StatementError = sa.exc.DBAPIError.instance(
        sql, params, exc, dialect.loaded_dbapi.Error, connection_invalidated=lost, dialect=dialect
    )
    return error
