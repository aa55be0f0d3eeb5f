"""``SiteRun.unfinished``, what a timed-out site test prints: the tasks not done (failed, or
never run), with their state, attempt and pilot from the Task Queue's database, and the log lines
that name them."""

from __future__ import annotations

import time
from pathlib import Path

from glidein_ext.testbed.site_runs import SiteRun


def test_unfinished_names_the_task_no_pilot_may_run(tmp_path: Path) -> None:
    with SiteRun(tmp_path / "site", "distributed", pilots=3, processes=1) as site:
        answer = site.operator.submit(
            {
                "name": "stuck",
                "tasks": [
                    {"name": "runs", "command": "true"},
                    {"name": "fails", "command": "false", "max_retries": 0},
                    {
                        "name": "waits",
                        "command": "true",
                        "requirements": 'TARGET.Site == "NOWHERE"',
                    },
                ],
            }
        )
        deadline = time.monotonic() + 60
        while True:
            (workflow,) = [
                w for w in site.operator.status().workflows if w.id == answer.workflow_id
            ]
            if workflow.tasks["done"] == 1 and workflow.tasks["failed"] == 1:
                break
            assert time.monotonic() < deadline, site.logs()
            time.sleep(0.2)
        shown = site.unfinished(answer.workflow_id)
        finished_everything = site.unfinished(answer.workflow_id + 1)
    lines = shown.splitlines()
    assert lines[0].startswith("task 2 fails: failed, attempt 1, pilot "), shown
    assert lines[1] == "task 3 waits: queued, attempt 0, pilot None", shown
    assert not any(" runs:" in line for line in lines)
    assert any("running task 2 (fails)" in line for line in lines[2:]), shown  # the pilot's log
    assert finished_everything == "every task done"  # a workflow without tasks left
