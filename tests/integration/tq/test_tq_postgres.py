"""The Task Queue on a real PostgreSQL server: the store, the service, two services on one database.

The server comes from ``pg_fixture`` (skips without PostgreSQL, fails if
``GLIDEIN_EXT_REQUIRE_POSTGRES=1``).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from glidein_ext.errors import TaskQueueError, TaskQueueNotFound, WorkflowError
from glidein_ext.tq import tables
from glidein_ext.tq.client import TqClient
from glidein_ext.tq.db import make_engine, migrate
from glidein_ext.tq.store import Registration, Store
from glidein_ext.tq.workflow import generate, parse_workflow
from tests.integration.tq.conftest import OPERATOR, PILOT, env
from tests.integration.tq.pg_fixture import PgServer, pg_server, pg_url

__all__ = ["pg_server", "pg_url"]  # fixtures, used by name


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def engine(pg_url: str) -> Iterator[sa.Engine]:
    engine = make_engine(pg_url)
    migrate(engine)
    yield engine
    engine.dispose()


def _store(engine: sa.Engine, clock: Clock, **kwargs: Any) -> Store:
    store = Store(engine, clock=clock, **kwargs)
    store.load()
    return store


# --- the store on PostgreSQL ---


def test_migrations_on_postgres_match_the_tables(engine: sa.Engine) -> None:
    assert engine.dialect.name == "postgresql"
    migrate(engine)  # idempotent
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), tables.metadata)
        version = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one()
    assert diff == []
    assert version == "0001"


def test_concurrent_migrations_do_not_collide(pg_url: str) -> None:
    engines = [make_engine(pg_url) for _ in range(4)]
    errors: list[BaseException] = []

    def run(engine: sa.Engine) -> None:
        try:
            migrate(engine)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(e,)) for e in engines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a migration hangs"
    assert errors == []
    with engines[0].connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM alembic_version")).scalar_one() == 1
    for engine in engines:
        engine.dispose()


def test_unreachable_postgres_is_a_task_queue_error(pg_server: PgServer) -> None:
    engine = make_engine(pg_server.url("no_such_database"))
    with pytest.raises(TaskQueueError, match="cannot migrate"):
        migrate(engine)
    engine.dispose()


def test_failed_submit_stores_nothing(engine: sa.Engine) -> None:
    store = _store(engine, Clock())
    store.submit(parse_workflow({"tasks": [{"name": "x", "command": "true", "outputs": ["/o"]}]}))
    pilot = store.register(Registration(site="S", host="h"))["pilot_id"]
    task = store.request(pilot)
    assert task is not None
    assert store.complete(pilot, task["task_id"], task["attempt"], 0, ["/o"])["accepted"] is True
    bad = {
        "name": "bad",
        "tasks": [
            {"name": "a", "command": "true", "outputs": ["/fresh"]},
            {"name": "b", "command": "true", "outputs": ["/o"]},  # /o exists: whole submit fails
        ],
    }
    with pytest.raises(WorkflowError, match="task 'b', field 'outputs'"):
        store.submit(parse_workflow(bad))
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(tables.workflows)).scalar() == 1
        assert conn.execute(sa.select(sa.func.count()).select_from(tables.tasks)).scalar() == 1
    assert len(store.matcher) == 0


def test_w1_runs_through_the_protocol(engine: sa.Engine) -> None:
    store = _store(engine, Clock())
    store.submit(parse_workflow(generate("w1", scale=4 / 80)))
    pilot = store.register(Registration(site="S", host="h1"))["pilot_id"]
    done = 0
    while (task := store.request(pilot)) is not None:
        answer = store.complete(pilot, task["task_id"], task["attempt"], 0, task["outputs"])
        assert answer == {"accepted": True, "duplicate": False, "state": "done"}
        again = store.complete(pilot, task["task_id"], task["attempt"], 0, task["outputs"])
        assert again == {"accepted": False, "duplicate": True, "state": "done"}
        done += 1
    assert done == 8
    status = store.status()
    assert status["workflows"][0]["tasks"]["done"] == 8
    assert status["completions"] == 8
    rows = store.task_rows()
    assert {r["state"] for r in rows} == {"done"} and {r["attempt"] for r in rows} == {1}


def test_heartbeat_lapse_requeues_and_stale_completion_is_not_counted(engine: sa.Engine) -> None:
    clock = Clock()
    store = _store(engine, clock, heartbeat_timeout=30.0)
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
    assert store.status()["completions"] == 1


def test_restart_rebuilds_the_queue(pg_url: str) -> None:
    clock = Clock()
    first = make_engine(pg_url)
    migrate(first)
    store = _store(first, clock)
    store.submit(parse_workflow(generate("w1", scale=3 / 80)))
    pilot = store.register(Registration(site="S", host="h"))["pilot_id"]
    task = store.request(pilot)
    assert task is not None
    first.dispose()
    second = make_engine(pg_url)
    reborn = _store(second, clock)
    assert len(reborn.matcher) == 2
    same = reborn.request(pilot)
    assert same is not None and same["task_id"] == task["task_id"]
    assert same["attempt"] == task["attempt"]
    second.dispose()


def test_two_stores_on_one_database_never_share_a_task(pg_url: str) -> None:
    """Two TQ processes' stores, each with its own matcher, racing for the same queued tasks."""
    engines = [make_engine(pg_url) for _ in range(2)]
    migrate(engines[0])
    submitter = _store(engines[0], Clock())
    data = {"tasks": [{"name": f"t{i:03d}", "command": "true"} for i in range(60)]}
    submitter.submit(parse_workflow(data))
    stores = [_store(engine, Clock()) for engine in engines]  # both know all 60 tasks
    assert all(len(store.matcher) == 60 for store in stores)
    handed: list[tuple[int, int]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def pilot(store: Store, index: int) -> None:
        try:
            pilot_id = store.register(Registration(site="S", host=f"h{index}"))["pilot_id"]
            while (task := store.request(pilot_id)) is not None:
                with lock:
                    handed.append((task["task_id"], task["attempt"]))
                store.complete(pilot_id, task["task_id"], task["attempt"], 0, [])
        except BaseException as exc:
            errors.append(exc)

    # Each store serialises its own callers (its lock), so the race is the one between two TQ
    # processes: two database sessions, two matchers that both believe every task is queued.
    threads = [threading.Thread(target=pilot, args=(stores[i % 2], i)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads) and errors == []
    counts = Counter(task_id for task_id, _ in handed)
    assert len(counts) == 60 and set(counts.values()) == {1}, counts.most_common(3)
    assert {attempt for _, attempt in handed} == {1}
    rows = stores[0].task_rows()
    assert {r["state"] for r in rows} == {"done"} and {r["attempt"] for r in rows} == {1}
    for engine in engines:
        engine.dispose()


# --- the service on PostgreSQL ---


class PgService:
    """``glidein-ext tq serve --database postgresql+psycopg://...`` as a subprocess."""

    def __init__(self, directory: Path, database: str, **settings: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        port_file = directory / "port"
        with open(directory / "serve.log", "ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "glidein_ext",
                    "tq",
                    "serve",
                    "--database",
                    database,
                    "--port",
                    "0",
                    "--port-file",
                    str(port_file),
                ],
                env=env(**{f"GLIDEIN_EXT_TQ_{k.upper()}": v for k, v in settings.items()}),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError((directory / "serve.log").read_text())
            time.sleep(0.1)
        self.url = f"http://127.0.0.1:{int(port_file.read_text())}"
        while True:
            try:
                self.operator().status()
                return
            except TaskQueueError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def operator(self) -> TqClient:
        return TqClient(self.url, OPERATOR, timeout=30)

    def pilot(self) -> TqClient:
        return TqClient(self.url, PILOT, timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Callable[..., PgService]]:
    started: list[PgService] = []

    def start(name: str, database: str, **settings: str) -> PgService:
        service = PgService(tmp_path / name, database, **settings)
        started.append(service)
        return service

    yield start
    for service in started:
        service.stop()


def test_service_runs_w1_on_postgres_with_real_pilots(
    pg_url: str,
    services: Callable[..., PgService],
    pilots: Any,
    wait_until: Callable[..., Any],
    all_finished: Callable[..., Any],
) -> None:
    service = services("tq", pg_url, wait_for_data="3")
    client = service.operator()
    data = generate("w1", scale=0.05, size=100)
    assert client.submit(data)["tasks"] == 8
    for name in ("p1", "p2"):
        pilots.start(service.url, name, "--max-idle", "4")
    status = wait_until(lambda: all_finished(client), 90, "W1 to finish on PostgreSQL")
    tasks = status["workflows"][0]["tasks"]
    assert tasks["done"] == 8 and tasks["failed"] == 0 and status["completions"] == 8
    for process in pilots.processes:
        assert process.wait(timeout=30) == 0
    # the rows really are in PostgreSQL, and the outputs really are on the SE
    engine = make_engine(pg_url)
    with engine.connect() as conn:
        states: dict[str, int] = dict(
            conn.execute(
                sa.select(tables.tasks.c.state, sa.func.count()).group_by(tables.tasks.c.state)
            ).all()
        )
        produced = conn.execute(
            sa.select(sa.func.count())
            .select_from(tables.files)
            .where(tables.files.c.produced_by.is_not(None))
        ).scalar_one()
    engine.dispose()
    assert states == {"done": 8} and produced == 8
    assert len(list((pilots.se_dir / "store").rglob("*.dat"))) == 8


def test_two_services_on_one_database_never_hand_a_task_twice(
    pg_url: str, services: Callable[..., PgService]
) -> None:
    first = services("tq-a", pg_url)
    data = {"name": "race", "tasks": [{"name": f"t{i:03d}", "command": "true"} for i in range(80)]}
    assert first.operator().submit(data)["tasks"] == 80
    second = services("tq-b", pg_url)  # loads the same 80 queued tasks from the database
    handed: list[tuple[int, int, str]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    start = threading.Barrier(16)

    def pilot(service: PgService, index: int) -> None:
        client = service.pilot()
        try:
            pilot_id = client.register(site="T0", host=f"wn{index}")["pilot_id"]
            start.wait(30)
            while (task := client.request(pilot_id)) is not None:
                with lock:
                    handed.append((task["task_id"], task["attempt"], service.url))
                client.complete(
                    pilot_id, task_id=task["task_id"], attempt=task["attempt"], exit_code=0
                )
            client.deregister(pilot_id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=pilot, args=((first, second)[i % 2], i)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    assert not any(thread.is_alive() for thread in threads) and errors == []
    counts = Counter(task_id for task_id, _, _ in handed)
    assert len(counts) == 80 and set(counts.values()) == {1}, counts.most_common(3)
    assert {attempt for _, attempt, _ in handed} == {1}
    by_service = Counter(url for _, _, url in handed)
    assert set(by_service) == {first.url, second.url}  # both really handed out tasks
    status = second.operator().status()
    assert status["workflows"][0]["tasks"]["done"] == 80 and status["completions"] == 80
