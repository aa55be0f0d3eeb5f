"""A distributed site whose first pilot is the master (Delgado Peris 2014 §III.B), a workflow of
chains that logs each run, and the waits the master-failure tests share: for the runs, for a
new master, for the workflow's end."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any

from glidein_ext.testbed.site_runs import SITE, SiteRun
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.protocol import WorkflowStatus

CHAINS = 50


def chains_workflow(runs: Path) -> dict[str, Any]:
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


def masters(operator: TqClient) -> list[dict[str, Any]]:
    """The master roles the Task Queue granted at ``SITE``, oldest first."""
    found: list[dict[str, Any]] = operator.call("GET", "/api/v1/counters")["masters"][SITE]
    return found


def wait_for_runs(site: SiteRun, runs: Path, count: int, within: float = 60.0) -> None:
    """Until the tasks logged ``count`` runs in ``runs``."""
    deadline = time.monotonic() + within
    while not runs.exists() or len(runs.read_text().split()) < count:
        assert time.monotonic() < deadline, site.logs()
        time.sleep(0.05)


def wait_for_a_second_master(site: SiteRun, since: float, within: float) -> list[dict[str, Any]]:
    """The site's master roles once a second one was granted, within ``within`` seconds of
    ``since`` (``time.monotonic``)."""
    operator = site.operator
    deadline = since + within
    while len(found := masters(operator)) < 2:
        assert time.monotonic() < deadline, site.logs()
        time.sleep(0.2)
    return found


def wait_for_the_chains(site: SiteRun, workflow_id: int, within: float) -> WorkflowStatus:
    """The workflow of ``chains_workflow`` once each of its tasks is done or failed."""
    operator = site.operator
    deadline = time.monotonic() + within
    while True:
        (workflow,) = [w for w in operator.status().workflows if w.id == workflow_id]
        if workflow.tasks["done"] + workflow.tasks["failed"] == 2 * CHAINS:
            return workflow
        assert time.monotonic() < deadline, (
            f"{workflow.tasks}\n{site.logs()}\n{site.unfinished(workflow_id)}"
        )
        time.sleep(0.3)
