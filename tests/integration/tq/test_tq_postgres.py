"""What only PostgreSQL does: migrations under an advisory lock, two stores and two services on one
database, and the service with real pilots on it.

The store's own suite runs on PostgreSQL too (``tests/unit/tq/service/store/test_tq_store.py``).
The server comes from ``tests.support.postgres`` (skips without PostgreSQL, fails if
``GLIDEIN_EXT_REQUIRE_POSTGRES=1``).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from glidein_ext.errors import TaskQueueError
from glidein_ext.testbed.tq_server import TqServer
from glidein_ext.tq.client.protocol import Completion, Registration
from glidein_ext.tq.service import tables
from glidein_ext.tq.service.db import make_engine, migrate
from glidein_ext.tq.service.store import Store
from glidein_ext.tq.workflow import generate, parse_workflow
from tests.support.postgres import PgServer, pg_server, pg_url

__all__ = ["pg_server", "pg_url"]  # fixtures, used by name


def _store(engine: sa.Engine) -> Store:
    store = Store(engine)
    store.load()
    return store


# --- several processes on one database ---


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


def test_two_stores_on_one_database_never_share_a_task(pg_url: str) -> None:
    """Two TQ processes' stores, each with its own matcher, racing for the same queued tasks."""
    engines = [make_engine(pg_url) for _ in range(2)]
    migrate(engines[0])
    submitter = _store(engines[0])
    data = {"tasks": [{"name": f"t{i:03d}", "command": "true"} for i in range(60)]}
    submitter.submit(parse_workflow(data))
    stores = [_store(engine) for engine in engines]  # both know all 60 tasks
    assert all(len(store.matcher) == 60 for store in stores)
    handed: list[tuple[int, int]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def pilot(store: Store, index: int) -> None:
        try:
            pilot_id = store.register(Registration(site="S", host=f"h{index}")).pilot_id
            while (task := store.request(pilot_id)) is not None:
                with lock:
                    handed.append((task.task_id, task.attempt))
                store.complete(pilot_id, Completion(task.task_id, task.attempt, 0))
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
    assert {r.state for r in rows} == {"done"} and {r.attempt for r in rows} == {1}
    for engine in engines:
        engine.dispose()


# --- the service on PostgreSQL ---


def test_service_runs_w1_on_postgres_with_real_pilots(
    pg_url: str,
    tq_server: Callable[..., TqServer],
    pilots: Any,
    wait_until: Callable[..., Any],
    all_finished: Callable[..., Any],
) -> None:
    service = tq_server(database=pg_url, wait_for_data="3")
    client = service.operator()
    data = generate("w1", scale=0.05, size=100)
    assert client.submit(data).tasks == 8
    for name in ("p1", "p2"):
        pilots.start(service.url, name, "--max-idle", "4")
    status = wait_until(lambda: all_finished(client), 90, "W1 to finish on PostgreSQL")
    tasks = status.workflows[0].tasks
    assert tasks["done"] == 8 and tasks["failed"] == 0 and status.completions == 8
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
    pg_url: str, tq_server: Callable[..., TqServer]
) -> None:
    first = tq_server("tq-a", database=pg_url)
    data = {"name": "race", "tasks": [{"name": f"t{i:03d}", "command": "true"} for i in range(80)]}
    assert first.operator().submit(data).tasks == 80
    second = tq_server("tq-b", database=pg_url)  # loads the same 80 queued tasks
    handed: list[tuple[int, int, str]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    start = threading.Barrier(16)

    def pilot(service: TqServer, index: int) -> None:
        client = service.pilot()
        try:
            pilot_id = client.register(Registration(site="T0", host=f"wn{index}")).pilot_id
            start.wait(30)
            while (task := client.request(pilot_id)) is not None:
                with lock:
                    handed.append((task.task_id, task.attempt, service.url))
                client.complete(pilot_id, Completion(task.task_id, task.attempt, 0))
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
    assert status.workflows[0].tasks["done"] == 80 and status.completions == 80
