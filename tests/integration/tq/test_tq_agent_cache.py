"""The pilot agent's cache on the real Task Queue: same-host hard links (IV.D), LRU evictions
reported to the TQ (IV.C)."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from glidein_ext.testbed.tq_server import TqServer
from glidein_ext.tq.client.client import TqClient

CachedFile = Callable[[Path, str], Path]
READ = "sh -c 'cat $TQ_INPUTS > /dev/null'"
WRITE = "sh -c 'head -c 1200 /dev/zero > $TQ_OUTPUTS'"


@pytest.fixture
def server(tq_server: Callable[..., TqServer]) -> TqServer:
    """A Task Queue asking for a heartbeat every second: cache reports arrive fast."""
    return tq_server(heartbeat_interval="1")


def _tq_cached(database: str, host: str) -> list[str] | None:
    with sqlite3.connect(database) as db:
        row = db.execute(
            "SELECT cached FROM pilots WHERE host = ? AND state != 'gone'", (host,)
        ).fetchone()
    return None if row is None else list(json.loads(row[0]))


def _done(client: TqClient, name: str) -> bool:
    for wf in client.status().workflows:
        if wf.name == name:
            return wf.tasks["done"] == 1
    return False


def test_second_pilot_on_the_host_links_the_first_pilots_file(
    server: TqServer, pilots: Any, wait_until: Callable[..., Any], cached_file: CachedFile
) -> None:
    client = server.operator()
    (pilots.se_dir / "store").mkdir()
    (pilots.se_dir / "store" / "in.dat").write_bytes(os.urandom(5000))
    pilots.start(server.url, "p1", "--max-idle", "40", host="wn")
    first: dict[str, Any] = {"name": "first", "available": ["/store/in.dat"]}
    first["tasks"] = [{"name": "a", "command": READ, "inputs": ["/store/in.dat"]}]
    client.submit(first)
    wait_until(lambda: _done(client, "first"), 30, "the first pilot to read the input")
    in_p1 = cached_file(pilots.tmp_path / "pilots" / "p1", "/store/in.dat")
    # The SE loses the file: the second pilot can only get it from the first one's cache.
    (pilots.se_dir / "store" / "in.dat").rename(pilots.se_dir / "gone.dat")
    pilots.start(server.url, "p2", "--max-idle", "40", "--memory", "2048", host="wn")
    second: dict[str, Any] = {"name": "second", "available": ["/store/in.dat"]}
    second["tasks"] = [
        {
            "name": "b",
            "command": READ,
            "inputs": ["/store/in.dat"],
            "requirements": "TARGET.Memory >= 2048",  # only p2 may run it
        }
    ]
    client.submit(second)
    wait_until(lambda: _done(client, "second"), 30, "the second pilot to run its task")
    in_p2 = cached_file(pilots.tmp_path / "pilots" / "p2", "/store/in.dat")
    assert in_p2.stat().st_ino == in_p1.stat().st_ino
    assert in_p1.stat().st_nlink == 2
    with sqlite3.connect(server.database) as db:
        (report,) = db.execute("SELECT report FROM tasks WHERE name = 'b'").fetchone()
    assert "/store/in.dat:host" in report or "/store/in.dat:cache" in report, report


def test_small_cache_evicts_lru_and_the_tq_forgets_the_file(
    server: TqServer, pilots: Any, wait_until: Callable[..., Any], cached_file: CachedFile
) -> None:
    client = server.operator()
    pilots.start(
        server.url,
        "p1",
        "--max-idle",
        "40",
        "--cache-max-space",
        "3000",
        "--cache-min-threshold",
        "500",
        host="wn1",
    )
    outputs = [f"/store/o{i}.dat" for i in range(3)]
    for i, lfn in enumerate(outputs):  # one workflow each, so they run in this order
        task = {"name": f"t{i}", "command": WRITE, "outputs": [lfn]}
        workflow = {"name": f"w{i}", "tasks": [task]}
        client.submit(workflow)
        wait_until(lambda i=i: _done(client, f"w{i}"), 30, f"task t{i}")
    # 3 x 1200 bytes do not fit in 3000 - 500: the least recently used output (o0) is evicted.
    workdir = pilots.tmp_path / "pilots" / "p1"
    assert cached_file(workdir, outputs[2]).stat().st_size == 1200
    assert not (workdir / "cache" / "data" / "store" / "o0.dat").exists()
    assert (pilots.se_dir / "store" / "o0.dat").stat().st_size == 1200  # still on the SE
    wait_until(
        lambda: _tq_cached(server.database, "wn1") == sorted(outputs[1:]),
        15,
        "the Task Queue to learn of the eviction",
    )
    log = pilots.log("p1")
    assert "removed the last link of /store/o0.dat" in log, log


def _requests(client: TqClient, name: str) -> dict[str, int]:
    counters = client.call("GET", "/api/v1/counters")
    (found,) = [w for w in counters["workflows"] if w["name"] == name]
    return dict(found["requests"])


def test_a_cache_report_follows_a_task_only_when_the_cache_changed(
    tq_server: Callable[..., TqServer],
    pilots: Any,
    wait_until: Callable[..., Any],
    cached_file: CachedFile,
) -> None:
    """Pre-DHT: a task that leaves the cache as the Task Queue knows it costs one call (its
    completion, with the request for the next task), no heartbeat; one whose output evicts another
    is reported at once, long before the next periodic heartbeat (10 minutes here)."""
    server = tq_server(heartbeat_interval="600", stuck_silent_after="1200")
    client = server.operator()
    pilots.start(
        server.url,
        "p1",
        "--max-idle",
        "60",
        "--cache-max-space",
        "3000",
        "--cache-min-threshold",
        "500",
        host="wn1",
    )
    trivial = {"name": "trivial", "tasks": [{"name": f"t{i}", "command": "true"} for i in range(8)]}
    client.submit(trivial)
    wait_until(lambda: all_done(client, "trivial", 8), 60, "the trivial tasks")
    requests = _requests(client, "trivial")
    calls = (requests["request"], requests["complete-and-request"], requests.get("heartbeat"))
    assert calls == (1, 8, None) and "complete" not in requests
    outputs = [f"/store/o{i}.dat" for i in range(3)]
    for i, lfn in enumerate(outputs):  # one workflow each, so they run in this order
        client.submit(
            {"name": f"w{i}", "tasks": [{"name": "t", "command": WRITE, "outputs": [lfn]}]}
        )
        wait_until(lambda i=i: _done(client, f"w{i}"), 30, f"task t{i}")
    assert cached_file(pilots.tmp_path / "pilots" / "p1", outputs[2]).stat().st_size == 1200
    wait_until(
        lambda: _tq_cached(server.database, "wn1") == sorted(outputs[1:]),
        15,
        "the Task Queue to learn of the eviction from the report after the task",
    )


def all_done(client: TqClient, name: str, count: int) -> bool:
    return any(wf.name == name and wf.tasks["done"] == count for wf in client.status().workflows)
