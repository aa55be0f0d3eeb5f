"""The human view of `tq status`: each site's master and epoch beside its pilots, the failed
tasks' pointer, the stuck-work warnings; `tq status --tasks` and `tq task` lines."""

from __future__ import annotations

from glidein_ext.cli.tq.views import render_status, render_task, render_tasks
from glidein_ext.tq.client.protocol import Status, WorkflowStatus

STATES = {"waiting": 0, "queued": 1, "running": 2, "done": 3, "failed": 1}


def test_status_shows_each_sites_master_failed_tasks_and_warnings() -> None:
    status = Status(
        workflows=(WorkflowStatus(1, "w1", 0.0, STATES),),
        pilots={"T1": {"idle": 2, "busy": 2}, "T2": {"idle": 1}},
        completions=4,
        queued_groups=1,
    )
    text = render_status(
        status,
        None,
        masters=[
            {"site": "T1", "master_id": 3, "epoch": 2, "master_seen": 1.0},
            {"site": "T3", "master_id": None, "epoch": 5, "master_seen": None},
        ],
        warnings=[{"kind": "queued-idle", "message": "task 9 (workflow 1) has been queued"}],
    )
    lines = text.splitlines()
    (t1,) = [line for line in lines if line.strip().startswith("T1 ")]
    assert t1.endswith("busy=2 idle=2  master=3 epoch=2")
    (t2,) = [line for line in lines if line.strip().startswith("T2 ")]
    assert "master" not in t2  # not a distributed site
    (t3,) = [line for line in lines if line.strip().startswith("T3 ")]
    assert t3.endswith("-  master=none epoch=5")
    assert "failed tasks: 1 (why: tq status --tasks --state failed; tq task ID)" in lines
    assert lines[-1] == "WARNING queued-idle: task 9 (workflow 1) has been queued"


def test_task_lines_name_the_pilot_site_host_and_last_report_line() -> None:
    row = {
        "id": 5,
        "workflow_id": 1,
        "name": "nope",
        "state": "failed",
        "attempt": 1,
        "exit_code": 127,
        "pilot_id": 2,
        "site": "T1",
        "host": "wn1",
        "report": "cannot start: no-such-command",
    }
    (_, line) = render_tasks([row]).splitlines()
    assert "127 pilot 2@T1/wn1  cannot start: no-such-command" in line
    detail = render_task(
        {
            **row,
            "workflow": "w",
            "step": 0,
            "failures": 1,
            "max_retries": 0,
            "command": "no-such-command",
            "submitted_at": 0.0,
            "runnable_since": 0.0,
            "finished_at": 1.0,
            "why": None,
            "attempts": [
                {
                    "attempt": 1,
                    "ok": False,
                    "exit_code": 127,
                    "pilot_id": 2,
                    "site": "T1",
                    "host": "wn1",
                    "at": 1.0,
                }
            ],
        }
    )
    assert "  pilot:      pilot 2 at T1 on wn1" in detail
    assert "    cannot start: no-such-command" in detail


def test_many_warnings_are_cut_to_ten_lines_and_a_count() -> None:
    status = Status(workflows=(), pilots={}, completions=0, queued_groups=0)
    warnings = [{"kind": "queued-idle", "message": f"task {i}"} for i in range(25)]
    lines = render_status(status, None, None, warnings).splitlines()
    assert lines[-11] == "WARNING queued-idle: task 0"
    assert lines[-2] == "WARNING queued-idle: task 9"
    assert lines[-1] == "WARNING and 15 more (tq status --json)"


def test_status_shows_where_each_distributed_sites_rounds_spend_their_time() -> None:
    status = Status(workflows=(), pilots={"T1": {"idle": 3}}, completions=0, queued_groups=0)
    masters = [{"site": "T1", "master_id": 3, "epoch": 1, "master_seen": 1.0}]
    phases = {"T1": {"wait": 2.0, "broadcast": 6.0, "sync": 2.0, "solve": 0.0}}
    lines = render_status(status, None, masters, None, phases).splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("T1 "))
    assert lines[at + 1] == "    rounds: 10.0 s in all: broadcast 60%, sync 20%, wait 20%, solve 0%"
    quiet = render_status(status, None, masters, None, {"T1": {"wait": 0.0}})
    assert "rounds:" not in quiet  # no round yet: no line
