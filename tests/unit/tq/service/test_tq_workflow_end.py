"""A workflow's end, as a completion finds it on SQLite and PostgreSQL: its turnaround is counted
when the last task ends, whether it succeeds (the tasks waiting for it are released in the same
statement that asks whether the workflow goes on) or fails for good, and not before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from glidein_ext.tq.client.protocol import Completion, Registration
from glidein_ext.tq.service import tables
from glidein_ext.tq.service.db import make_engine, migrate
from glidein_ext.tq.service.store import Store
from glidein_ext.tq.workflow import parse_workflow
from tests.support.postgres import pg_server, pg_url

__all__ = ["pg_server", "pg_url"]  # fixtures, used by name


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Clock]]:
    database = str(tmp_path / "tq.sqlite")
    if request.param == "postgresql":
        database = request.getfixturevalue("pg_url")
    engine = make_engine(database)
    migrate(engine)
    clock = Clock()
    store = Store(engine, clock=clock)
    store.load()
    yield store, clock
    engine.dispose()


def _turnaround(store: Store, clock: Clock, workflow: int) -> Any:
    runs = store.counters.snapshot(clock.now)["workflows"]
    return next(r["turnaround"] for r in runs if r["id"] == workflow)


def _run_one(store: Store, clock: Clock, pilot: int, exit_code: int = 0) -> str:
    assignment = store.request(pilot)
    assert assignment is not None
    clock.now += 10
    outputs = tuple(assignment.outputs) if exit_code == 0 else ()
    store.complete(pilot, Completion(assignment.task_id, assignment.attempt, exit_code, outputs))
    return assignment.name


def test_the_last_success_ends_the_workflow_and_releases_what_waits(
    store: tuple[Store, Clock],
) -> None:
    tq, clock = store
    spec = {
        "name": "chain",
        "tasks": [
            {"name": "make", "command": "true", "outputs": ["/store/a.dat"]},
            {"name": "read", "command": "true", "inputs": ["/store/a.dat"]},
            {"name": "last", "command": "true", "after": ["read"]},
        ],
    }
    workflow = tq.submit(parse_workflow(spec))
    pilot = tq.register(Registration(site="S", host="wn1")).pilot_id
    assert _run_one(tq, clock, pilot) == "make"
    assert _turnaround(tq, clock, workflow) is None
    assert _run_one(tq, clock, pilot) == "read"  # released by its input
    assert _turnaround(tq, clock, workflow) is None
    assert _run_one(tq, clock, pilot) == "last"  # released by its ``after``
    assert _turnaround(tq, clock, workflow) == pytest.approx(30.0)
    with tq.engine.connect() as conn:
        site = conn.execute(sa.select(tables.files.c.site)).scalar_one()
    assert site == "S"  # recorded with the file, where it was produced


def test_a_last_task_failing_for_good_ends_the_workflow(store: tuple[Store, Clock]) -> None:
    tq, clock = store
    spec = {"name": "fails", "tasks": [{"name": "t", "command": "false", "max_retries": 1}]}
    workflow = tq.submit(parse_workflow(spec))
    pilot = tq.register(Registration(site="S", host="wn1")).pilot_id
    _run_one(tq, clock, pilot, exit_code=3)  # requeued: one retry left
    assert _turnaround(tq, clock, workflow) is None
    _run_one(tq, clock, pilot, exit_code=3)
    assert [r.state for r in tq.task_rows()] == ["failed"]
    assert _turnaround(tq, clock, workflow) == pytest.approx(20.0)
