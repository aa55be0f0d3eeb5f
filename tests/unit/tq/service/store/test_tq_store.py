"""The store, once per engine (SQLite file, real PostgreSQL): migrations, atomic submit, the pilot
protocol, idempotent completion, a workflow's end, reaping, restart, the PilotMonitor's
bookkeeping, the views.

The PostgreSQL runs come from ``tests.support.postgres`` (skipped without PostgreSQL, failed if
``GLIDEIN_EXT_REQUIRE_POSTGRES=1``); what only PostgreSQL does (several processes on one
database, migrations under an advisory lock) is in ``tests/integration/tq/test_tq_postgres.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from glidein_ext.errors import TaskQueueNotFound, WorkflowError
from glidein_ext.tq.client.protocol import (
    Completion,
    CompletionAnswer,
    Neighbour,
    Registration,
    TaskAssignment,
)
from glidein_ext.tq.manager.monitor import SiteView
from glidein_ext.tq.models import Architecture, PilotInfo
from glidein_ext.tq.service import tables
from glidein_ext.tq.service.db import make_engine, migrate
from glidein_ext.tq.service.store import Store
from glidein_ext.tq.workflow import generate, parse_workflow
from tests.support.clock import Clock
from tests.support.postgres import pg_server, pg_url

__all__ = ["pg_server", "pg_url"]  # fixtures, used by name

OpenStore = Callable[..., Store]


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh empty database: a SQLite file, or a database on the session's PostgreSQL."""
    if request.param == "sqlite":
        return str(tmp_path / "tq.sqlite")
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def open_store(database: str) -> Iterator[OpenStore]:
    """``open_store(clock, **Store options)``: a store on ``database``, migrated and loaded (a
    second call is a restarted TQ on the same database)."""
    engines: list[sa.Engine] = []

    def open_(clock: Clock, **kwargs: Any) -> Store:
        engine = make_engine(database)
        engines.append(engine)
        migrate(engine)
        store = Store(engine, clock=clock, **kwargs)
        store.load()
        return store

    yield open_
    for engine in engines:
        engine.dispose()


def _w1(n: int) -> dict[str, Any]:
    return generate("w1", scale=n / 80)


def _register(store: Store, host: str = "h", **fields: Any) -> int:
    return store.register(Registration(site="S", host=host, **fields)).pilot_id


def _finish(store: Store, pilot: int, task: TaskAssignment, exit_code: int = 0) -> CompletionAnswer:
    """The pilot reports ``task`` ended, with every declared output."""
    return store.complete(pilot, Completion(task.task_id, task.attempt, exit_code, task.outputs))


def test_migrations_create_exactly_the_tables(database: str) -> None:
    engine = make_engine(database)
    migrate(engine)
    migrate(engine)  # idempotent
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), tables.metadata)
        version = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one()
    engine.dispose()
    assert diff == []
    assert version == "0006_pilot_keys"


def test_w1_runs_through_the_protocol(open_store: OpenStore) -> None:
    store = open_store(Clock())
    store.submit(parse_workflow(_w1(4)))
    pilot = _register(store, "h1")
    done = 0
    while (task := store.request(pilot)) is not None:
        answer = _finish(store, pilot, task)
        assert answer == CompletionAnswer(accepted=True, duplicate=False, state="done")
        again = _finish(store, pilot, task)
        assert again == CompletionAnswer(accepted=False, duplicate=True, state="done")
        done += 1
    assert done == 8
    status = store.status()
    assert status.workflows[0].tasks["done"] == 8
    assert status.completions == 8
    assert status.pilots == {"S": {"idle": 1}}
    rows = store.task_rows()
    assert {r.state for r in rows} == {"done"} and {r.attempt for r in rows} == {1}


def test_register_answers_the_heartbeat_and_the_neighbours(open_store: OpenStore) -> None:
    store = open_store(Clock(), heartbeat_interval=7, default_architecture=Architecture.CENTRALIZED)
    first = store.register(Registration(site="S", host="wn", cache_dir="/c1"))
    second = store.register(Registration(site="S", host="wn", cache_dir="/c2"))
    assert (first.heartbeat_interval, first.architecture, first.others) == (7, "centralized", ())
    assert second.others == (Neighbour(first.pilot_id, "/c1"),)
    assert store.heartbeat(first.pilot_id).others == (Neighbour(second.pilot_id, "/c2"),)


def test_step1_goes_to_the_pilot_holding_its_input(open_store: OpenStore) -> None:
    store = open_store(Clock(), wait_for_data=60.0)
    store.submit(parse_workflow(_w1(2)))
    a, b = _register(store, "h1"), _register(store, "h2")
    ta = store.request(a)
    tb = store.request(b)
    assert ta is not None and tb is not None
    _finish(store, a, ta)
    _finish(store, b, tb)
    # each step1 task reads one step0 output: each pilot gets the one it produced
    na, nb = store.request(a), store.request(b)
    assert na is not None and nb is not None
    assert na.inputs == ta.outputs and nb.inputs == tb.outputs
    assert na.cached_inputs == 1


def test_wait_for_data_holds_then_releases(open_store: OpenStore) -> None:
    clock = Clock()
    store = open_store(clock, wait_for_data=60.0)
    store.submit(parse_workflow(_w1(1)))  # one chain: s0 -> s1
    a = _register(store, "h1")
    ta = store.request(a)
    assert ta is not None
    _finish(store, a, ta)
    b = _register(store, "h2")
    assert store.request(b) is None  # a is idle and holds the input
    clock.now += 61
    assert store.request(b) is not None


def test_failed_submit_stores_nothing(open_store: OpenStore, database: str) -> None:
    store = open_store(Clock())
    missing = {"tasks": [{"name": "a", "command": "true", "inputs": ["/missing"]}]}
    with pytest.raises(WorkflowError, match="task 'a', field 'inputs'"):
        store.submit(parse_workflow(missing))
    assert store.status().workflows == ()
    store.submit(parse_workflow({"tasks": [{"name": "x", "command": "true", "outputs": ["/o"]}]}))
    pilot = _register(store)
    task = store.request(pilot)
    assert task is not None
    assert _finish(store, pilot, task).accepted is True
    clash = {
        "name": "bad",
        "tasks": [
            {"name": "a", "command": "true", "outputs": ["/fresh"]},
            {"name": "b", "command": "true", "outputs": ["/o"]},  # /o exists: whole submit fails
        ],
    }
    with pytest.raises(WorkflowError, match="task 'b', field 'outputs'"):
        store.submit(parse_workflow(clash))
    engine = make_engine(database)
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(tables.workflows)).scalar() == 1
        assert conn.execute(sa.select(sa.func.count()).select_from(tables.tasks)).scalar() == 1
    engine.dispose()
    assert len(store.matcher) == 0


def test_heartbeat_lapse_requeues_and_stale_completion_is_not_counted(
    open_store: OpenStore,
) -> None:
    clock = Clock()
    store = open_store(clock, heartbeat_timeout=30.0)
    store.submit(parse_workflow(_w1(1)))
    a = _register(store, "h1")
    task = store.request(a)
    assert task is not None
    clock.now += 20
    b = _register(store, "h1")
    assert store.heartbeat(b).others == (Neighbour(a, ""),)
    clock.now += 15
    store.heartbeat(b)
    assert store.reap() == [a]
    with pytest.raises(TaskQueueNotFound):
        store.heartbeat(a)
    again = store.request(b)
    assert again is not None and again.task_id == task.task_id
    assert again.attempt == task.attempt + 1
    stale = _finish(store, a, task)
    assert stale == CompletionAnswer(accepted=False, duplicate=False, state="running")
    fresh = _finish(store, b, again)
    assert fresh.accepted is True
    assert store.status().completions == 1
    assert store.status().pilots == {"S": {"lost": 1, "idle": 1}}


def test_deregister_requeues_the_task_it_held(open_store: OpenStore) -> None:
    store = open_store(Clock())
    store.submit(parse_workflow(_w1(1)))
    pilot = _register(store)
    task = store.request(pilot)
    assert task is not None
    store.deregister(pilot)
    with pytest.raises(TaskQueueNotFound, match="is gone"):
        store.request(pilot)
    other = _register(store)
    again = store.request(other)
    assert again is not None and (again.task_id, again.attempt) == (task.task_id, 2)


def test_restart_rebuilds_the_queue(open_store: OpenStore) -> None:
    clock = Clock()
    store = open_store(clock)
    store.submit(parse_workflow(_w1(3)))
    pilot = _register(store)
    task = store.request(pilot)
    assert task is not None
    store.engine.dispose()
    reborn = open_store(clock)
    assert len(reborn.matcher) == 2  # the other step0 tasks
    same = reborn.request(pilot)  # the pilot asks again: it gets back the task it holds
    assert same == task


def test_failure_retries_then_fails(open_store: OpenStore) -> None:
    store = open_store(Clock())
    data = {"tasks": [{"name": "a", "command": "false", "max_retries": 1}]}
    store.submit(parse_workflow(data))
    pilot = _register(store)
    states = []
    while (task := store.request(pilot)) is not None:
        states.append(_finish(store, pilot, task, exit_code=1).state)
    assert states == ["queued", "failed"]
    (row,) = store.task_rows()
    assert (row.state, row.failures, row.exit_code, row.pilot_id) == ("failed", 2, 1, None)


def test_centralized_mode_uses_the_request_cache_list(open_store: OpenStore) -> None:
    store = open_store(Clock(), default_architecture=Architecture.CENTRALIZED)
    data = {
        "available": ["/x", "/y"],
        "tasks": [
            {"name": "a", "command": "true", "inputs": ["/x"]},
            {"name": "b", "command": "true", "inputs": ["/y"]},
        ],
    }
    store.submit(parse_workflow(data))
    pilot = _register(store)
    task = store.request(pilot, cached=["/y"])
    assert task is not None and task.name == "b" and task.cached_inputs == 1


def test_pilot_monitor_bookkeeping(open_store: OpenStore) -> None:
    store = open_store(Clock())
    for batch_id in ("7.0", "7.1", "7.2"):
        store.record_submission(batch_id, "S")
    store.mark_vanished(["7.2"])
    assert store.site_view("S") == SiteView(inactive=2)
    _register(store, batch_id="7.0")  # the pilot started by batch job 7.0 arrives
    store.mark_vanished(["7.0"])  # registered: no longer a candidate
    assert store.submissions("S") == {"7.0": "registered", "7.1": "inactive", "7.2": "vanished"}
    assert store.site_view("S") == SiteView(inactive=1, idle=1)
    assert store.status().pilots == {"S": {"idle": 1, "inactive": 1}}
    store.submit(parse_workflow({"tasks": [{"name": "a", "command": "true"}]}))
    assert store.queued_groups_for(PilotInfo(0, site="S"), 1000.0) == [1]


def _one(workflow: str, task: str, output: str) -> Any:
    return parse_workflow(
        {
            "name": workflow,
            "tasks": [{"name": task, "command": "true", "outputs": [output], "max_retries": 0}],
        }
    )


def test_a_second_producer_of_an_output_is_refused_naming_both(open_store: OpenStore) -> None:
    """pending, running or done, another producer is refused at submit; once the
    first producer failed for good, the output may be produced again."""
    store = open_store(Clock())
    store.submit(_one("first", "make", "/store/x"))
    pilot = _register(store)
    for _ in range(2):  # queued, then running
        with pytest.raises(WorkflowError) as info:
            store.submit(_one("second", "remake", "/store/x"))
        message = str(info.value)
        assert "\n" not in message
        for name in ("'remake'", "'make'", "'first'", "'second'", "'/store/x'"):
            assert name in message, message
        task = store.request(pilot)
    assert task is not None
    store.complete(pilot, Completion(task.task_id, task.attempt, 1, ()))  # failed for good
    assert [r.state for r in store.task_rows()] == ["failed"]
    store.submit(_one("second", "remake", "/store/x"))
    assert len(store.status().workflows) == 2


def test_a_completion_whose_output_exists_ends_failed_not_in_a_loop(
    open_store: OpenStore, database: str
) -> None:
    """two producers got in (an older TQ stored them); the second completion is
    answered once, the task failed for good with the reason, and a repeat is a duplicate."""
    store = open_store(Clock())
    store.submit(_one("first", "make", "/store/x"))
    engine = make_engine(database)
    with engine.begin() as conn:  # as an older TQ, which kept no task_outputs, would have
        if sa.inspect(conn).has_table("task_outputs"):
            conn.execute(sa.text("DELETE FROM task_outputs"))
    engine.dispose()
    store.submit(_one("second", "remake", "/store/x"))
    pilot = _register(store)
    first = store.request(pilot)
    assert first is not None
    assert _finish(store, pilot, first).state == "done"
    second = store.request(pilot)
    assert second is not None
    answer = _finish(store, pilot, second)
    assert answer == CompletionAnswer(accepted=True, duplicate=False, state="failed")
    assert _finish(store, pilot, second).duplicate
    row = store.task_rows()[1]
    assert row.state == "failed" and row.report is not None
    assert "/store/x" in row.report and "already produced by task 1" in row.report
    assert store.request(pilot) is None


def test_heartbeat_answers_the_cached_files_queued_tasks_read(open_store: OpenStore) -> None:
    clock = Clock()
    store = open_store(clock)
    holder = _register(store, "h1", cached=("/store/in.dat", "/store/other.dat"))
    assert store.heartbeat(holder).needed_cached == ()  # nothing queued: nothing needed
    task: dict[str, Any] = {"name": "a", "command": "true", "inputs": ["/store/in.dat"]}
    store.submit(
        parse_workflow(
            {
                "name": "w",
                "available": ["/store/in.dat"],
                "tasks": [{**task, "requirements": 'TARGET.Host == "h2"'}],
            }
        )
    )
    assert store.heartbeat(holder).needed_cached == ("/store/in.dat",)
    # a new cache list counts at once
    assert store.heartbeat(holder, ["/store/other.dat"]).needed_cached == ()
    assert store.heartbeat(holder, ["/store/in.dat"]).needed_cached == ("/store/in.dat",)
    runner = _register(store, "h2")
    clock.now += 3600  # past waitForData (the holder is idle and holds the input)
    assert store.request(runner) is not None  # running: no longer a task still to run
    assert store.heartbeat(holder).needed_cached == ()


def _turnaround(store: Store, clock: Clock, workflow: int) -> Any:
    runs = store.counters.snapshot(clock.now)["workflows"]
    return next(r["turnaround"] for r in runs if r["id"] == workflow)


def _run_next(store: Store, clock: Clock, pilot: int, exit_code: int = 0) -> str:
    """The pilot takes its next task, which ends 10 s later; the task's name."""
    task = store.request(pilot)
    assert task is not None
    clock.now += 10
    _finish(store, pilot, task, exit_code)
    return task.name


def test_the_last_success_ends_the_workflow_and_releases_what_waits(
    open_store: OpenStore,
) -> None:
    # The tasks a completion releases and whether its workflow goes on are one statement.
    clock = Clock()
    store = open_store(clock)
    spec = {
        "name": "chain",
        "tasks": [
            {"name": "make", "command": "true", "outputs": ["/store/a.dat"]},
            {"name": "read", "command": "true", "inputs": ["/store/a.dat"]},
            {"name": "last", "command": "true", "after": ["read"]},
        ],
    }
    workflow = store.submit(parse_workflow(spec))
    pilot = _register(store)
    assert _run_next(store, clock, pilot) == "make"
    assert _turnaround(store, clock, workflow) is None
    assert _run_next(store, clock, pilot) == "read"  # released by its input
    assert _turnaround(store, clock, workflow) is None
    assert _run_next(store, clock, pilot) == "last"  # released by its ``after``
    assert _turnaround(store, clock, workflow) == pytest.approx(30.0)
    with store.engine.connect() as conn:
        site = conn.execute(sa.select(tables.files.c.site)).scalar_one()
    assert site == "S"  # recorded with the file, where it was produced


def test_a_last_task_failing_for_good_ends_the_workflow(open_store: OpenStore) -> None:
    clock = Clock()
    store = open_store(clock)
    spec = {"name": "fails", "tasks": [{"name": "t", "command": "false", "max_retries": 1}]}
    workflow = store.submit(parse_workflow(spec))
    pilot = _register(store)
    _run_next(store, clock, pilot, exit_code=3)  # requeued: one retry left
    assert _turnaround(store, clock, workflow) is None
    _run_next(store, clock, pilot, exit_code=3)
    assert [r.state for r in store.task_rows()] == ["failed"]
    assert _turnaround(store, clock, workflow) == pytest.approx(20.0)
