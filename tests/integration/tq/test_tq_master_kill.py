"""SIGKILL of a distributed site's master in the middle of a workflow (Delgado Peris 2014 §III.B):
the lowest-id live pilot takes over within 10 s, the workflow completes, and no task is lost or run
twice (from the tasks' own log of runs, their output files and the Task Queue's states)."""

from __future__ import annotations

import shlex
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from glidein_ext.testbed.site_runs import SiteRun

# CPU-heavy: runs in one xdist worker with the other heavy tests (tests/conftest.py).
pytestmark = pytest.mark.heavy

CHAINS = 50


def _workflow(runs: Path) -> dict[str, Any]:
    """W1-like chains whose tasks log each run and write their name and inputs to the output."""

    def command(name: str) -> str:
        body = (
            f"echo {name} >> {runs}; "
            "for o in $TQ_OUTPUTS; do { echo " + name + '; for i in $TQ_INPUTS; do cat "$i"; '
            'done; } > "$o"; done; sleep 0.8'
        )
        return shlex.join(["sh", "-c", body])

    tasks: list[dict[str, Any]] = []
    for i in range(CHAINS):
        first, second = f"k-s0-{i:03d}", f"k-s1-{i:03d}"
        step0 = f"/store/kill/step0/f{i:03d}.dat"
        tasks.append({"name": first, "command": command(first), "outputs": [step0]})
        tasks.append(
            {
                "name": second,
                "step": 1,
                "command": command(second),
                "inputs": [step0],
                "outputs": [f"/store/kill/step1/f{i:03d}.dat"],
            }
        )
    return {"name": "kill", "defaults": {"max_runtime": 120}, "tasks": tasks}


def master_first(tmp_path: Path, pilots: int, **more: Any) -> SiteRun:
    """A distributed site of ``pilots`` pilots in two processes, pilot 1 alone in the first: it
    registers first, so it is the master; rounds every second (``more``: other ``SiteRun``
    fields)."""
    return SiteRun(
        tmp_path / "site",
        "distributed",
        pilots=pilots,
        processes=2,
        first_alone=True,
        pilot_args=("--round-period", "1", "--round-window", "0.1"),
        **more,
    )


def test_killing_the_master_elects_another_and_loses_nothing(tmp_path: Path) -> None:
    runs = tmp_path / "runs.log"
    with master_first(tmp_path, 31, tq_args=("--master-timeout", "4")) as site:
        operator = site.operator
        (first,) = operator.call("GET", "/api/v1/counters")["masters"]["T2_XX_Test"]
        assert (first["pilot_id"], first["epoch"]) == (1, 1)
        answer = operator.submit(_workflow(runs))
        deadline = time.monotonic() + 60
        while not runs.exists() or len(runs.read_text().split()) < 35:
            assert time.monotonic() < deadline, site.logs()
            time.sleep(0.1)
        killed_at = time.time()
        site.procs[0].send_signal(signal.SIGKILL)  # the master, mid-run
        site.procs[0].wait()
        while True:
            masters = operator.call("GET", "/api/v1/counters")["masters"]["T2_XX_Test"]
            if len(masters) > 1:
                break
            assert time.time() - killed_at < 30, site.logs()
            time.sleep(0.2)
        new = masters[-1]
        assert new["epoch"] == 2 and new["pilot_id"] == 2  # the lowest-id live pilot
        assert new["at"] - killed_at < 10.0, f"a new master after {new['at'] - killed_at:.1f} s"
        print(f"new master {new} after {new['at'] - killed_at:.1f} s")
        deadline = time.monotonic() + 120
        while True:
            status = operator.status()
            (workflow,) = [w for w in status.workflows if w.id == answer.workflow_id]
            if workflow.tasks["done"] + workflow.tasks["failed"] == 2 * CHAINS:
                break
            assert time.monotonic() < deadline, (
                f"{workflow.tasks}\n{site.logs()}\n{site.unfinished(answer.workflow_id)}"
            )
            time.sleep(0.3)
        assert workflow.tasks["done"] == 2 * CHAINS
        ran = runs.read_text().split()
        se = site.se_dir / "store" / "kill"
        outputs = {p.name: p.read_text() for p in (se / "step1").iterdir()}
    assert sorted(ran) == sorted(set(ran)) and len(ran) == 2 * CHAINS  # each task ran once
    assert len(outputs) == CHAINS
    for i in range(CHAINS):  # each chain's output carries both steps, in order
        assert outputs[f"f{i:03d}.dat"] == f"k-s1-{i:03d}\nk-s0-{i:03d}\n"
