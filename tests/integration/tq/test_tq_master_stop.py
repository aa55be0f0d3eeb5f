"""A distributed site's master frozen (SIGSTOP) mid-workflow past the master timeout, then
thawed (SIGCONT), as a master slowed down by load is (Delgado Peris 2014 §III.B): another pilot
takes the role, the old one steps down at its next call (409, stale epoch) with whatever completions
it
had acknowledged but not synced, and the workers' outboxes resend them.  The workflow completes,
no task runs twice, and no pilot stays busy at the Task Queue once everything is done (the
500-pilot failover run left 116 pilots busy forever and the workflow unfinished)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from glidein_ext.testbed.site_runs import SITE
from tests.support import tq_master_runs as master_runs

# CPU-heavy: runs in one xdist worker with the other heavy tests (tests/conftest.py).
pytestmark = pytest.mark.heavy


def test_a_frozen_master_is_superseded_and_no_completion_is_lost(tmp_path: Path) -> None:
    runs = tmp_path / "runs.log"
    # pilot 1, alone in its process: the master, frozen below
    with master_runs.master_first(tmp_path, 31, tq_args=("--master-timeout", "4")) as site:
        operator = site.operator
        answer = operator.submit(master_runs.chains_workflow(runs))
        master_runs.wait_for_runs(site, runs, 35)
        master = site.procs[0]
        master.send_signal(signal.SIGSTOP)  # completions reach it, unsynced, as it freezes
        stopped_at = time.monotonic()
        try:
            master_runs.wait_for_a_second_master(site, since=stopped_at, within=40)
        finally:
            master.send_signal(signal.SIGCONT)  # it wakes holding what it acknowledged
        workflow = master_runs.wait_for_the_chains(site, answer.workflow_id, within=150)
        assert workflow.tasks["done"] == 2 * master_runs.CHAINS
        deadline = time.monotonic() + 30
        while operator.status().pilots.get(SITE, {}).get("busy", 0):
            assert time.monotonic() < deadline, f"{operator.status().pilots}\n{site.logs()}"
            time.sleep(0.3)
        granted = master_runs.masters(operator)
        ran = runs.read_text().split()
    assert granted[0]["pilot_id"] == 1 and granted[1]["epoch"] == 2
    # each task ran once
    assert sorted(ran) == sorted(set(ran)) and len(ran) == 2 * master_runs.CHAINS
