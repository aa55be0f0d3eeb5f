"""The store: migrations, atomic submit, the pilot protocol, idempotent completion, reaping."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from glidein_ext.errors import TaskQueueNotFound, WorkflowError
from glidein_ext.tq import tables
from glidein_ext.tq.db import make_engine, migrate
from glidein_ext.tq.models import CacheMode
from glidein_ext.tq.store import Registration, Store
from glidein_ext.tq.workflow import generate, parse_workflow


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _store(tmp_path: Path, clock: Clock, **kwargs: object) -> Store:
    engine = make_engine(str(tmp_path / "tq.sqlite"))
    migrate(engine)
    store = Store(engine, clock=clock, **kwargs)  # type: ignore[arg-type]
    store.load()
    return store


def test_migrations_create_exactly_the_tables(tmp_path: Path) -> None:
    engine = make_engine(str(tmp_path / "m.sqlite"))
    migrate(engine)
    migrate(engine)  # idempotent
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), tables.metadata)
    assert diff == []


def _w1(n: int) -> dict[str, object]:
    return generate("w1", scale=n / 80)


def test_w1_runs_through_the_protocol(tmp_path: Path) -> None:
    clock = Clock()
    store = _store(tmp_path, clock)
    store.submit(parse_workflow(_w1(4)))
    pilot = store.register(Registration(site="S", host="h1"))["pilot_id"]
    done = 0
    while (task := store.request(pilot)) is not None:
        answer = store.complete(pilot, task["task_id"], task["attempt"], 0, task["outputs"])
        assert answer == {"accepted": True, "duplicate": False, "state": "done"}
        again = store.complete(pilot, task["task_id"], task["attempt"], 0, task["outputs"])
        assert again["duplicate"] is True
        done += 1
    assert done == 8
    status = store.status()
    assert status["workflows"][0]["tasks"]["done"] == 8
    assert status["completions"] == 8


def test_step1_goes_to_the_pilot_holding_its_input(tmp_path: Path) -> None:
    clock = Clock()
    store = _store(tmp_path, clock, wait_for_data=60.0)
    store.submit(parse_workflow(_w1(2)))
    a = store.register(Registration(site="S", host="h1"))["pilot_id"]
    b = store.register(Registration(site="S", host="h2"))["pilot_id"]
    ta = store.request(a)
    tb = store.request(b)
    assert ta is not None and tb is not None
    store.complete(a, ta["task_id"], ta["attempt"], 0, ta["outputs"])
    store.complete(b, tb["task_id"], tb["attempt"], 0, tb["outputs"])
    # each step1 task reads one step0 output: each pilot gets the one it produced
    na, nb = store.request(a), store.request(b)
    assert na is not None and nb is not None
    assert na["inputs"] == ta["outputs"] and nb["inputs"] == tb["outputs"]
    assert na["cached_inputs"] == 1


def test_wait_for_data_holds_then_releases(tmp_path: Path) -> None:
    clock = Clock()
    store = _store(tmp_path, clock, wait_for_data=60.0)
    store.submit(parse_workflow(generate("w1", scale=1 / 80)))  # one chain: s0 -> s1
    a = store.register(Registration(site="S", host="h1"))["pilot_id"]
    ta = store.request(a)
    assert ta is not None
    store.complete(a, ta["task_id"], ta["attempt"], 0, ta["outputs"])
    b = store.register(Registration(site="S", host="h2"))["pilot_id"]
    assert store.request(b) is None  # a is idle and holds the input
    clock.now += 61
    assert store.request(b) is not None


def test_failed_submit_stores_nothing(tmp_path: Path) -> None:
    clock = Clock()
    store = _store(tmp_path, clock)
    data = {"tasks": [{"name": "a", "command": "true", "inputs": ["/missing"]}]}
    with pytest.raises(WorkflowError, match="task 'a', field 'inputs'"):
        store.submit(parse_workflow(data))
    assert store.status()["workflows"] == []
    assert len(store.matcher) == 0


def test_heartbeat_lapse_requeues_and_stale_completion_is_not_counted(tmp_path: Path) -> None:
    clock = Clock()
    store = _store(tmp_path, clock, heartbeat_timeout=30.0)
    store.submit(parse_workflow(generate("w1", scale=1 / 80)))
    a = store.register(Registration(site="S", host="h1"))["pilot_id"]
    task = store.request(a)
    assert task is not None
    clock.now += 20
    b = store.register(Registration(site="S", host="h1"))["pilot_id"]
    assert store.heartbeat(b)["others"] == [{"pilot_id": a, "cache_dir": ""}]
    clock.now += 15
    store.heartbeat(b)
    assert store.reap() == [a]
    with pytest.raises(TaskQueueNotFound):
        store.heartbeat(a)
    again = store.request(b)
    assert again is not None and again["task_id"] == task["task_id"]
    assert again["attempt"] == task["attempt"] + 1
    stale = store.complete(a, task["task_id"], task["attempt"], 0, task["outputs"])
    assert stale["accepted"] is False
    fresh = store.complete(b, again["task_id"], again["attempt"], 0, again["outputs"])
    assert fresh["accepted"] is True


def test_restart_rebuilds_the_queue(tmp_path: Path) -> None:
    clock = Clock()
    store = _store(tmp_path, clock)
    store.submit(parse_workflow(_w1(3)))
    pilot = store.register(Registration(site="S", host="h"))["pilot_id"]
    task = store.request(pilot)
    assert task is not None
    store.engine.dispose()
    reborn = _store(tmp_path, clock)
    assert len(reborn.matcher) == 2  # the other step0 tasks
    same = reborn.request(pilot)  # the pilot asks again: it gets back the task it holds
    assert same is not None and same["task_id"] == task["task_id"]
    assert same["attempt"] == task["attempt"]


def test_failure_retries_then_fails(tmp_path: Path) -> None:
    clock = Clock()
    store = _store(tmp_path, clock)
    data = {"tasks": [{"name": "a", "command": "false", "max_retries": 1}]}
    store.submit(parse_workflow(data))
    pilot = store.register(Registration(site="S", host="h"))["pilot_id"]
    states = []
    while (task := store.request(pilot)) is not None:
        states.append(store.complete(pilot, task["task_id"], task["attempt"], 1, [])["state"])
    assert states == ["queued", "failed"]


def test_centralized_mode_uses_the_request_cache_list(tmp_path: Path) -> None:
    clock = Clock()
    store = _store(tmp_path, clock, cache_mode=CacheMode.CENTRALIZED)
    data = {
        "available": ["/x", "/y"],
        "tasks": [
            {"name": "a", "command": "true", "inputs": ["/x"]},
            {"name": "b", "command": "true", "inputs": ["/y"]},
        ],
    }
    store.submit(parse_workflow(data))
    pilot = store.register(Registration(site="S", host="h"))["pilot_id"]
    task = store.request(pilot, cached=["/y"])
    assert task is not None and task["name"] == "b" and task["cached_inputs"] == 1
