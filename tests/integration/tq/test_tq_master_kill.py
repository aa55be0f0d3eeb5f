"""SIGKILL of a distributed site's master in the middle of a workflow (Delgado Peris 2014 §III.B):
the lowest-id live pilot takes over within 10 s, the workflow completes, and no task is lost or run
twice (from the tasks' own log of runs, their output files and the Task Queue's states)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.support import tq_master_runs as master_runs

# CPU-heavy: runs in one xdist worker with the other heavy tests (tests/conftest.py).
pytestmark = pytest.mark.heavy


def test_killing_the_master_elects_another_and_loses_nothing(tmp_path: Path) -> None:
    runs = tmp_path / "runs.log"
    with master_runs.master_first(tmp_path, 31, tq_args=("--master-timeout", "4")) as site:
        operator = site.operator
        (first,) = master_runs.masters(operator)
        assert (first["pilot_id"], first["epoch"]) == (1, 1)
        answer = operator.submit(master_runs.chains_workflow(runs))
        master_runs.wait_for_runs(site, runs, 35)
        killed_at, killed = time.time(), time.monotonic()
        site.procs[0].send_signal(signal.SIGKILL)  # the master, mid-run
        site.procs[0].wait()
        new = master_runs.wait_for_a_second_master(site, since=killed, within=30)[-1]
        assert new["epoch"] == 2 and new["pilot_id"] == 2  # the lowest-id live pilot
        assert new["at"] - killed_at < 10.0, f"a new master after {new['at'] - killed_at:.1f} s"
        print(f"new master {new} after {new['at'] - killed_at:.1f} s")
        workflow = master_runs.wait_for_the_chains(site, answer.workflow_id, within=120)
        assert workflow.tasks["done"] == 2 * master_runs.CHAINS
        ran = runs.read_text().split()
        se = site.se_dir / "store" / "kill"
        outputs = {p.name: p.read_text() for p in (se / "step1").iterdir()}
    # each task ran once
    assert sorted(ran) == sorted(set(ran)) and len(ran) == 2 * master_runs.CHAINS
    assert len(outputs) == master_runs.CHAINS
    for i in range(master_runs.CHAINS):  # each chain's output carries both steps, in order
        assert outputs[f"f{i:03d}.dat"] == f"k-s1-{i:03d}\nk-s0-{i:03d}\n"
