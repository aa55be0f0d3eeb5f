"""Why a task waits, as `condor_q -better-analyze` says it, against a real `tq serve`: `tq task`
shows what the task asks for and each condition with the live pilots it rejects and the nearest
value offered (text and JSON), `tq status --tasks` gives a queued task its short why, and the
no-progress warning on a workflow whose tasks match no live pilot says so."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

from glidein_ext.testbed.tq_server import TqServer
from glidein_ext.tq.client.protocol import Registration
from tests.support.cli import operator_env, run_cli

PICKY = {
    "name": "picky",
    "tasks": [
        {
            "name": "big",
            "command": "true",
            "requirements": 'Memory > 100000 && Site == "T1_NOWHERE"',
            "rank": "Memory",
            "request_cpus": 64,
            "request_memory": 2000,
        }
    ],
}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=operator_env())


def _register(server: TqServer, n: int) -> None:
    for i in range(n):
        server.pilot().register(
            Registration(site="T2_XY", host=f"h{i}", cpus=8, memory=8000, disk=20000)
        )


def test_task_names_each_clause_and_resource_with_what_it_rejects(
    tq_server: Callable[..., TqServer],
) -> None:
    server = tq_server()
    server.operator().submit(PICKY)
    _register(server, 3)

    text = cli("tq", "task", "1", "--tq", server.url)
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert 'requirements: Memory > 100000 && Site == "T1_NOWHERE"' in out
    assert "rank:       Memory" in out
    assert "requests:   cpus 64, memory 2000 MB, disk 0 MB" in out
    assert "analysis over 3 live pilot(s): 0 meet every condition" in out
    assert "    Memory > 100000: rejects 3 of 3; the largest pilot has 8,000" in out
    assert '    Site == "T1_NOWHERE": rejects 3 of 3; the pilots have Site "T2_XY" (3)' in out
    assert "    request_cpus 64: rejects 3 of 3; the largest pilot has 8" in out
    assert "    request_memory 2,000 MB: rejects 0 of 3" in out
    assert "why:        no matching pilot: none of the 3 live pilot(s) (T2_XY=3)" in out

    answer = json.loads(cli("tq", "task", "1", "--json", "--tq", server.url).stdout)
    assert answer["asks"] == {
        "requirements": 'Memory > 100000 && Site == "T1_NOWHERE"',
        "rank": "Memory",
        "request_cpus": 64,
        "request_memory": 2000,
        "request_disk": 0,
        "max_runtime": 3600,
    }
    conditions = {c["text"]: c for c in answer["analysis"]["conditions"]}
    assert conditions["Memory > 100000"]["rejects"] == 3
    assert conditions["request_cpus 64"]["kind"] == "resource"
    assert answer["analysis"]["matching"] == 0

    listed = cli("tq", "status", "--tasks", "--tq", server.url)
    assert listed.returncode == 0, listed.stderr
    (line,) = [row for row in listed.stdout.splitlines() if " big " in row]
    assert "waits: Memory > 100000: rejects 3 of 3; the largest pilot has 8,000" in line


def test_no_progress_says_its_tasks_match_no_live_pilot(
    tq_server: Callable[..., TqServer], wait_until: Callable[..., Any]
) -> None:
    server = tq_server(stuck_interval="1", stuck_stalled_after="1")
    server.operator().submit(PICKY)
    _register(server, 1)
    wait_until(lambda: "made no progress" in server.log(), 30, "the no-progress warning")
    assert "none of its 1 queued task(s) matches a live pilot" in server.log()
    shown = cli("tq", "status", "--tq", server.url)
    assert "WARNING no-progress: workflow 1 (picky) made no progress for" in shown.stdout, (
        shown.stdout
    )
    assert "none of its 1 queued task(s) matches a live pilot (why: tq task 1)" in shown.stdout
