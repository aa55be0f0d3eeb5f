"""The request path's statements on the DBAPI cursor (``store.direct``): the same rows, values and
errors as SQLAlchemy's own execution, on a real SQLite database; plans for PostgreSQL whose
parameters are those SQLAlchemy would send (compiled only: the PostgreSQL integration tests run
them on a server); and the one connection the store's writes keep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from glidein_ext.tq.client.protocol import Registration
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.db import make_engine, migrate
from glidein_ext.tq.service.server import open_store
from glidein_ext.tq.service.settings import TqSettings
from glidein_ext.tq.service.store import direct
from glidein_ext.tq.service.store.pilots import _NEIGHBOURS, TAKE_ONE, _take_statement
from glidein_ext.tq.service.store.statements import _select, _update, insert_row, row_by_id

PILOT = {
    "site": "S",
    "host": "wn1",
    "se": "se.example",
    "cpus": 1,
    "memory": 2000,
    "disk": 1000,
    "attributes": "{}",
    "requirements": "true",
    "rank": "0",
    "cache_dir": "/cache",
    "cached": "[]",
    "state": "idle",
    "registered_at": 1.5,
    "last_seen": 2,  # an int into a FLOAT column: SQLAlchemy's SQLite bind makes it a float
}


def _pg() -> sa.Dialect:
    return postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]


@pytest.fixture
def engine(tmp_path: Path) -> sa.Engine:
    engine = make_engine(f"sqlite:///{tmp_path / 'tq.sqlite'}")
    migrate(engine)
    return engine


def _sa_engine_rows(
    engine: sa.Engine, statement: Any, params: dict[str, Any]
) -> list[tuple[Any, ...]]:
    with engine.begin() as conn:
        return [tuple(row) for row in conn.execute(statement, params)]


def test_an_insert_gives_the_new_id_and_converts_values_as_sqlalchemy_does(
    engine: sa.Engine,
) -> None:
    with engine.begin() as conn:
        first = insert_row(conn, t.pilots, PILOT)
        second = insert_row(conn, t.pilots, {**PILOT, "host": "wn2"})
        assert isinstance(first, direct.Ran)  # it ran on the cursor, not through SQLAlchemy
        assert second.inserted_primary_key == ((first.inserted_primary_key[0] or 0) + 1,)
        stored = conn.execute(sa.text("SELECT typeof(last_seen), last_seen FROM pilots")).all()
    assert stored == [("real", 2.0), ("real", 2.0)]  # not an SQLite integer


def test_a_select_gives_the_rows_sqlalchemy_gives_by_name_and_index(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        pilot_id = insert_row(conn, t.pilots, PILOT).inserted_primary_key[0]
        row = row_by_id(conn, t.pilots, pilot_id, locked=True)
        assert row_by_id(conn, t.pilots, pilot_id + 100) is None
    assert row is not None
    assert (row.id, row.host, row.last_seen, row[0]) == (pilot_id, "wn1", 2.0, pilot_id)
    expected = _sa_engine_rows(engine, _select("pilots", False), {"row_id_": pilot_id})
    assert [tuple(row)] == expected


def test_plain_rows_are_the_same_values_as_plain_tuples(engine: sa.Engine) -> None:
    """``plain``: a read of many rows gets the driver's tuples, the same values by index, on the
    cursor and through SQLAlchemy alike."""
    with engine.begin() as conn:
        ids = [insert_row(conn, t.pilots, {**PILOT, "host": f"wn{i}"}) for i in range(3)]
        query = _select("pilots", False)
        for pilot_id in (i.inserted_primary_key[0] for i in ids):
            named = direct.run(conn, query, {"row_id_": pilot_id}).all()
            plain = direct.run(conn, query, {"row_id_": pilot_id}, plain=True).all()
            assert [tuple(r) for r in named] == plain and type(plain[0]) is tuple
        everything = sa.select(t.pilots.c.id, t.pilots.c.host).where(
            t.pilots.c.id.in_([i.inserted_primary_key[0] for i in ids])  # expanding: SQLAlchemy
        )
        through = direct.run(conn, everything, plain=True)
        assert isinstance(through, direct.Ran)
        assert sorted(through.all()) == sorted(tuple(r) for r in conn.execute(everything))
        assert [type(r) for r in through.all()] == [tuple] * 3


def test_values_bound_in_the_statement_itself_are_sent(engine: sa.Engine) -> None:
    """``TAKE_ONE`` binds 'running', 1 and 'queued' itself: only the task and pilot are given."""
    with engine.begin() as conn:
        conn.execute(sa.insert(t.workflows).values(id=1, name="w", submitted_at=0.0))
        task = {
            "workflow_id": 1,
            "step": 0,
            "command": "true",
            "spec": "{}",
            "inputs": "[]",
            "outputs": "[]",
            "after": "[]",
            "priority": 0,
            "max_retries": 0,
            "attempt": 0,
            "failures": 0,
        }
        conn.execute(sa.insert(t.tasks), [{**task, "name": "a", "state": "queued"}])
        conn.execute(sa.insert(t.tasks), [{**task, "name": "b", "state": "waiting"}])
        taken = direct.run(conn, TAKE_ONE, {"c0": 1, "pilot": 7}).one_or_none()
        not_queued = direct.run(conn, TAKE_ONE, {"c0": 2, "pilot": 7}).one_or_none()
        again = direct.run(conn, TAKE_ONE, {"c0": 1, "pilot": 8}).one_or_none()
        state = conn.execute(sa.select(t.tasks.c.state, t.tasks.c.pilot_id)).all()
    assert (taken.id, taken.attempt, taken.name) == (1, 1, "a")
    assert not_queued is None and again is None
    assert state == [("running", 7), ("waiting", None)]


def test_a_driver_error_is_sqlalchemys_error(engine: sa.Engine) -> None:
    completion = {"task_id": 1, "attempt": 1, "pilot_id": 1, "exit_code": 0, "ok": 1, "at": 1.0}
    with engine.begin() as conn:
        conn.execute(sa.text("PRAGMA foreign_keys=OFF"))
        insert_row(conn, t.completions, completion)
        with pytest.raises(sa.exc.IntegrityError):
            insert_row(conn, t.completions, completion)


def test_a_statement_that_needs_sqlalchemy_runs_through_it(engine: sa.Engine) -> None:
    """An expanding list (``IN``) is SQLAlchemy's to expand: the result is SQLAlchemy's own."""
    statement = sa.select(t.pilots.c.host).where(
        t.pilots.c.id.in_(sa.bindparam("ids", expanding=True))
    )
    with engine.begin() as conn:
        ids = [
            insert_row(conn, t.pilots, {**PILOT, "host": h}).inserted_primary_key[0] for h in "ab"
        ]
        result = direct.run(conn, statement, {"ids": ids})
        assert not isinstance(result, direct.Ran)
        assert sorted(result.scalars()) == ["a", "b"]


@pytest.mark.parametrize("dialect", [sqlite.dialect(), _pg()], ids=["sqlite", "postgresql"])
@pytest.mark.parametrize(
    ("statement", "params"),
    [
        (TAKE_ONE, {"c0": 5, "pilot": 7}),
        (_take_statement(3), {"c0": 1, "c1": 2, "c2": 3, "pilot": 9}),
        (_NEIGHBOURS, {"host": "wn1", "pilot": 3}),
        (
            _update("pilots", ("last_seen", "state")),
            {"v_last_seen": 3, "v_state": "idle", "row_id_": 4},
        ),
    ],
    ids=["take-one", "take-three", "neighbours", "update"],
)
def test_a_plan_sends_the_parameters_sqlalchemy_would(
    dialect: sa.Dialect, statement: Any, params: dict[str, Any]
) -> None:
    plan = direct._plan(statement, dialect, ())
    assert isinstance(plan, direct._Plan)
    compiled = statement.compile(dialect=dialect)
    expected = compiled.construct_params(params)
    processors = {
        name: b.type.dialect_impl(dialect).bind_processor(dialect)
        for b, name in compiled.bind_names.items()
    }
    expected = {k: processors[k](v) if processors.get(k) else v for k, v in expected.items()}
    if compiled.positional:
        assert plan.args(params) == tuple(expected[name] for name in compiled.positiontup)
    else:
        assert plan.args(params) == expected
    assert plan.sql == compiled.string


def test_an_insert_on_postgresql_reads_its_new_id_from_returning() -> None:
    """There SQLAlchemy adds ``RETURNING`` the one key column; with a composite key, none."""
    plan = direct._plan(t.pilots.insert(), _pg(), ("site", "host"))
    assert isinstance(plan, direct._Plan) and plan.new_id == "returning"
    assert plan.sql.endswith("RETURNING pilots.id")
    plan = direct._plan(t.completions.insert(), _pg(), ("task_id", "attempt"))
    assert isinstance(plan, direct._Plan) and plan.new_id == "none"


def _registration(host: str) -> Registration:
    return Registration(site="S", host=host, cpus=1, ttl=86400)


def test_writes_keep_one_connection_and_replace_one_the_database_dropped(tmp_path: Path) -> None:
    store = open_store(TqSettings(database=f"sqlite:///{tmp_path / 'tq.sqlite'}"))
    checkouts: list[int] = []
    sa.event.listen(store.engine, "checkout", lambda *_: checkouts.append(1))
    try:
        first = store.register(_registration("wn1")).pilot_id
        store.register(_registration("wn2"))
        store.register(_registration("wn3"))
        assert len(checkouts) <= 1  # the first write's, kept since
        writer = store._core._writer
        assert writer is not None
        writer.invalidate()  # as when the server closed it
        fourth = store.register(_registration("wn4")).pilot_id
        assert fourth == first + 3
        replaced = store._core._writer
        assert replaced is not None and replaced is not writer and not replaced.invalidated
    finally:
        store.close()
    assert store._core._writer is None


def test_a_returning_the_caller_reads_gives_its_rows(engine: sa.Engine) -> None:
    """An INSERT ... RETURNING the key (the same SQL as the RETURNING SQLAlchemy adds on
    PostgreSQL) is SQLAlchemy's to read; a DELETE ... RETURNING is read like a SELECT."""
    insert = t.pilots.insert().returning(t.pilots.c.id)
    for dialect in (sqlite.dialect(), _pg()):
        assert not isinstance(direct._plan(insert, dialect, tuple(PILOT)), direct._Plan)
    delete = t.pilots.delete().where(t.pilots.c.host == sa.bindparam("h")).returning(t.pilots.c.id)
    with engine.begin() as conn:
        first = direct.run(conn, insert, PILOT).scalar_one()
        second = direct.run(conn, insert, {**PILOT, "host": "wn2"}).scalar_one()
        assert second == first + 1
        assert direct.run(conn, delete, {"h": "wn2"}).scalars() == [second]
        assert conn.execute(sa.select(t.pilots.c.id)).scalars().all() == [first]
