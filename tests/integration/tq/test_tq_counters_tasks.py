"""The run's counters as `tq status --json` shows them, against a real `tq serve` and a real
pilot: tasks are counted by how they ended, not by attempts, and the workflows' requests with
those received while none ran add up to the overall (docs/architectures.md, the run's counters)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from glidein_ext.testbed.tq_server import TqServer
from tests.support.cli import operator_env, run_cli


def test_failed_tasks_retried_are_counted_once_and_requests_add_up(
    tq_server: Callable[..., TqServer], pilots: Any, wait_until: Callable[..., Any]
) -> None:
    server = tq_server()
    client = server.operator()
    failing = {"command": "exit 3", "max_retries": 1}
    client.submit({"name": "bad", "tasks": [{"name": f"t{i}", **failing} for i in range(2)]})
    pilot = pilots.start(server.url, "p1", "--max-idle", "2")
    wait_until(lambda: client.status().workflows[0].tasks["failed"] == 2, 60, "both to fail")
    assert pilot.wait(timeout=60) == 0
    shown = run_cli("tq", "status", "--json", "--tq", server.url, env=operator_env())
    counters = json.loads(shown.stdout)["counters"]
    (workflow,) = counters["workflows"]
    assert workflow["tasks"] == 2
    assert (workflow["tasks_done"], workflow["tasks_failed"], workflow["attempts"]) == (0, 2, 4)
    overall = counters["overall"]
    assert overall["tasks"] == 2 and overall["tasks_done"] == 0 and overall["attempts"] == 4
    outside = sum(overall["requests_outside_workflows"].values())
    assert outside > 0  # the pilot's requests after the workflow ended, its deregistration
    assert workflow["requests_total"] + outside == overall["requests_total"]
