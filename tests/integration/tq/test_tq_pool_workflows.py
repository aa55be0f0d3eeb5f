"""W1, W2 and W3 (Hasham 2011 §V) on a pool of three TQ instances over one PostgreSQL database, run
by real pilot agents, while the instances are SIGKILLed and restarted one at a time
(Lee 2003: no single point of failure).

Every workflow is submitted through the first instance; each pilot is given one instance's URL
(two pilots per instance) and rides out its instance's death by retrying.  Afterwards the
database says it all: every task done, exactly one completion each, none handed out twice
(attempt 1), and pilots of every instance ran tasks that only the first one was told of.
"""

from __future__ import annotations

import functools
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from glidein_ext.testbed.tq_server import TqServer
from glidein_ext.tq.service import tables
from glidein_ext.tq.service.db import make_engine
from glidein_ext.tq.workflow import generate
from tests.support.postgres import pg_server, pg_url

# CPU-heavy: runs in one xdist worker with the other heavy tests (tests/conftest.py).
pytestmark = pytest.mark.heavy

__all__ = ["pg_server", "pg_url"]  # fixtures, used by name

INSTANCES = 3


@pytest.fixture
def pool(pg_url: str, tmp_path: Path) -> Iterator[list[TqServer]]:
    servers = [
        TqServer(tmp_path / f"tq{i}", database=pg_url, wait_for_data="5") for i in range(INSTANCES)
    ]
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.stop()


def _progress(server: TqServer, since: int, total: int) -> int:
    """The completions so far if more than ``since`` and the run is not over yet, else 0."""
    done = server.operator(timeout=10).status().completions
    return done if since < done < total else 0


def test_w1_w2_w3_complete_while_instances_are_killed_one_at_a_time(
    pool: list[TqServer],
    pg_url: str,
    pilots: Any,
    wait_until: Callable[..., Any],
    all_finished: Callable[..., Any],
) -> None:
    first = pool[0]
    client = first.operator(timeout=10)
    total = 0
    for kind in ("w1", "w2", "w3"):
        data = generate(kind, scale=0.1, size=100, sleep=0.7)
        total += len(data["tasks"])
        assert client.submit(data).tasks == len(data["tasks"])
    for i, server in enumerate(pool):  # two pilots per instance, on two hosts
        for j in range(2):
            pilots.start(server.url, f"p{i}{j}", "--max-idle", "8", host=f"wn{i}{j % 2}")
    # Kill each instance in turn once the pool has made progress since the last restart.
    done = 0
    for victim in pool:
        done = wait_until(
            functools.partial(_progress, victim, done, total), 90, "progress before the next kill"
        )
        victim.kill(signal.SIGKILL)
        victim.start()
    status = wait_until(lambda: all_finished(pool[1].operator(timeout=10)), 180, "W1-W3 to end")
    by_name = {wf.name: wf.tasks for wf in status.workflows}
    assert {name: tasks["done"] for name, tasks in by_name.items()} == {
        "w1": 16,
        "w2": 12,
        "w3": 12,
    }
    assert sum(tasks["failed"] for tasks in by_name.values()) == 0
    for process in pilots.processes:
        assert process.wait(timeout=60) == 0
    engine = make_engine(pg_url)
    with engine.connect() as conn:
        attempts = Counter(
            conn.execute(sa.select(tables.tasks.c.attempt, tables.tasks.c.state)).all()
        )
        completions = conn.execute(
            sa.select(tables.completions.c.task_id, tables.completions.c.ok)
        ).all()
        hosts = conn.execute(
            sa.select(tables.pilots.c.host)
            .join(tables.completions, tables.completions.c.pilot_id == tables.pilots.c.id)
            .distinct()
        ).scalars()
        ran_on = {host[:3] for host in hosts}  # "wn<instance>"
    engine.dispose()
    # no task lost (all done), none run twice (one handout, one completion each)
    assert attempts == {(1, "done"): total}, attempts
    per_task = Counter(task_id for task_id, _ in completions)
    assert len(per_task) == total and set(per_task.values()) == {1}
    assert {ok for _, ok in completions} == {1}
    assert ran_on == {f"wn{i}" for i in range(INSTANCES)}  # every instance served tasks
    assert len(list((pilots.se_dir / "store").rglob("*.dat"))) == total
    merged = (pilots.se_dir / "store/w3/step1/f0001.dat").read_bytes()
    assert b"w3-s0-0002" in merged and b"w3-s0-0003" in merged
    assert all(server.healthy() for server in pool)
