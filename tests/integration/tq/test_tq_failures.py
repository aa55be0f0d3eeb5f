"""Failures the TQ must ride out: a pilot killed mid-task, the TQ itself killed with SIGKILL."""

from __future__ import annotations

import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from glidein_ext.tq.workflow import generate
from tests.support.procs import running


def test_killed_pilot_gets_its_task_requeued_after_heartbeat_lapse(
    tq_server: Callable[..., Any], pilots: Any, wait_until: Callable[..., Any], tmp_path: Path
) -> None:
    server = tq_server(heartbeat_timeout="3", heartbeat_interval="1", reap_interval="1")
    client = server.operator()
    mark = tmp_path / "first-attempt"
    pid_file = tmp_path / "task.pid"
    # The first attempt hangs (and says where it runs); the retry finishes at once.
    body = (
        f'if [ -e {mark} ]; then echo again > "$TQ_OUTPUTS"; '
        f"else touch {mark}; echo $$ > {pid_file}; exec sleep 120; fi"
    )
    client.submit(
        {"tasks": [{"name": "slow", "command": f"sh -c '{body}'", "outputs": ["/out/slow"]}]}
    )
    first = pilots.start(server.url, "victim")
    wait_until(pid_file.exists, 30, "the task to start on the first pilot")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    orphan = int(pid_file.read_text())  # the killed pilot's task dies with it
    wait_until(lambda: not running(orphan), 10, "the killed pilot's task to die")
    second = pilots.start(server.url, "rescuer", "--max-idle", "8")
    status = wait_until(
        lambda: (s := client.status()).workflows[0].tasks["done"] == 1 and s,
        60,
        "the requeued task to finish on the second pilot",
    )
    assert status.pilots["T0"].get("lost") == 1
    assert second.wait(timeout=30) == 0
    with sqlite3.connect(server.database) as db:
        attempt, pilot = db.execute("SELECT attempt, pilot_id FROM tasks").fetchone()
        lost = db.execute("SELECT id FROM pilots WHERE state = 'lost'").fetchone()[0]
    assert attempt == 2 and pilot != lost
    assert (pilots.se_dir / "out/slow").read_text() == "again\n"


def test_tq_killed_and_restarted_loses_nothing_and_counts_once(
    tq_server: Callable[..., Any],
    pilots: Any,
    wait_until: Callable[..., Any],
    all_finished: Callable[..., Any],
) -> None:
    server = tq_server(wait_for_data="2")
    client = server.operator()
    data = generate("w1", scale=0.15, sleep=0.2)  # 12 -> 12 tasks
    total = len(data["tasks"])
    client.submit(data)
    for name in ("a", "b", "c"):
        pilots.start(server.url, name, "--max-idle", "8", "--retry-for", "120")

    def done() -> int:
        return int(client.status().workflows[0].tasks["done"])

    wait_until(lambda: done() >= 4, 60, "a few completions before the kill")
    server.kill(signal.SIGKILL)
    time.sleep(1.5)  # pilots keep running, fail to report, and retry
    server.start()  # the same database and port
    status = wait_until(lambda: all_finished(client), 120, "the workflow after the restart")
    assert status.workflows[0].tasks["done"] == total
    assert status.completions == total
    with sqlite3.connect(server.database) as db:
        twice = db.execute(
            "SELECT task_id FROM completions WHERE ok = 1 GROUP BY task_id HAVING COUNT(*) > 1"
        ).fetchall()
        states = db.execute("SELECT state, COUNT(*) FROM tasks GROUP BY state").fetchall()
    assert twice == [] and states == [("done", total)]
    for process in pilots.processes:
        assert process.wait(timeout=30) == 0
    outputs = sorted(p.name for p in (pilots.se_dir / "store/w1/step1").iterdir())
    assert len(outputs) == total // 2


def test_sigterm_kills_the_task_deregisters_and_requeues(
    tq_server: Callable[..., Any], pilots: Any, wait_until: Callable[..., Any], tmp_path: Path
) -> None:
    server = tq_server()
    client = server.operator()
    started = tmp_path / "started"
    client.submit(
        {"tasks": [{"name": "long", "command": f"sh -c 'touch {started}; exec sleep 300'"}]}
    )
    pilot = pilots.start(server.url, "term")
    wait_until(started.exists, 30, "the task to start")
    pilot.terminate()
    assert pilot.wait(timeout=30) == 0
    status = client.status()
    assert status.pilots["T0"] == {"gone": 1}
    assert status.workflows[0].tasks["queued"] == 1 and status.completions == 0
