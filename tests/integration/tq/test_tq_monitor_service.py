"""`tq serve --sites`: the service's own PilotMonitor submits pilots to the chroot's real schedd.

A real glidein runs them; they register and run the site's tasks; the service keeps the site
within maxPilots and at minPilots, notices a pilot that vanished from the queue, and survives a
site whose schedd is down (logged every pass).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from glidein_ext.sandbox.pool import CondorSandbox, Glidein
from glidein_ext.testbed.tq_server import OPERATOR, PILOT, TqServer, tq_env
from glidein_ext.tq.manager.pilot_submit import PilotManager
from glidein_ext.tq.service.db import make_engine
from glidein_ext.tq.service.store import Store
from tests.integration.tq.conftest import CLAIM

pytestmark = pytest.mark.condor
POOL = "127.0.0.1:9618"
SITE, NOWHERE, DOWN = "T2_MONITORED", "T3_NOWHERE", "T9_DOWN"


@pytest.fixture
def glidein(sandbox: CondorSandbox) -> Iterator[Glidein]:
    started = sandbox.start_glidein("tq-monitor", 2, cron_period=5, lifetime="30m")
    yield started
    started.stop()


def site_views(server: TqServer) -> dict[str, dict[str, Any]]:
    """``GET /api/v1/sites``: the service's PilotMonitor, per site."""
    answer = server.operator(timeout=10).call("GET", "/api/v1/sites")
    return {site["site"]: site for site in answer["sites"]}


def alive(site: dict[str, Any]) -> int:
    return int(site["inactive"] + site["idle"] + site["busy"])


@pytest.mark.usefixtures("claim_to_be_glidein")
def test_service_pilot_monitor_submits_and_keeps_thresholds(
    sandbox: CondorSandbox,
    glidein: Glidein,
    tmp_path: Path,
    tq_server: Callable[..., TqServer],
    wait_until: Callable[..., Any],
) -> None:
    workdir = sandbox.make_dir(f"tq-monitor-{os.getpid()}")
    sites_file = tmp_path / "sites.yaml"
    pilot = {
        "executable": "/opt/glidein-ext/bin/glidein-ext",
        "workdir": workdir,
        "environment": {"GLIDEIN_EXT_TQ_PILOT_TOKEN": PILOT, "PATH": "/usr/bin:/bin"},
        "memory": 128,
        "disk": 100,
    }
    sites_file.write_text(
        yaml.safe_dump(
            {
                "defaults": {"pool": POOL, "pilot": pilot},
                "sites": {
                    SITE: {
                        "minPilots": 1,
                        "maxPilots": 2,
                        "pilot": {
                            "requirements": f'TARGET.GLIDEIN_ExtName =?= "{glidein.name}"',
                            "args": ["--max-idle", "4", "--poll", "0.3", "--min-free-mb", "1"],
                            "ttl": "2h",  # tasks declare max_runtime 3600 s by default
                        },
                    },
                    NOWHERE: {"minPilots": 1, "maxPilots": 1, "pilot": {"requirements": "false"}},
                    DOWN: {"minPilots": 1, "maxPilots": 1, "pool": "127.0.0.1:1"},
                },
            }
        )
    )
    service = tq_server(args=("--sites", str(sites_file), "--monitor-interval", "1s"), env=CLAIM)
    manager = PilotManager(POOL)
    try:
        # minPilots with an empty queue: the service submits one pilot by itself
        wait_until(lambda: site_views(service)[SITE]["submitted"] >= 1, 30, "the minPilots pilot")
        service.operator().submit(
            {
                "name": "monitored",
                "tasks": [
                    {
                        "name": f"t{i}",
                        "command": "sleep 2",
                        "requirements": f'TARGET.Site == "{SITE}"',
                    }
                    for i in range(6)
                ],
            }
        )
        most = 0

        def done() -> bool:
            nonlocal most
            view = site_views(service)[SITE]
            most = max(most, alive(view))
            assert alive(view) <= 2, view  # never more than maxPilots
            return service.operator().status().workflows[0].tasks["done"] == 6

        wait_until(done, 60, "the service's pilots to run the site's 6 tasks")
        assert most == 2  # the queue filled the site up to maxPilots
        assert service.operator().status().completions == 6
        with make_engine(service.database).connect() as conn:
            sites = {r[0] for r in conn.exec_driver_sql("SELECT site FROM pilots").all()}
        assert sites == {SITE}  # the pilots that ran the tasks are the ones the service sent

        # the queue drained: the pilots leave (--max-idle) and minPilots brings one back, only one
        after = site_views(service)[SITE]["submitted"]
        wait_until(
            lambda: (v := site_views(service)[SITE])["submitted"] > after and alive(v) >= 1,
            30,
            "a pilot resubmitted for minPilots",
        )
        for _ in range(10):
            assert alive(site_views(service)[SITE]) <= 1
            time.sleep(0.3)

        # a pilot that can never run, removed from the queue: noticed as vanished, replaced
        store = Store(make_engine(service.database))
        (first,) = store.submissions(NOWHERE)
        manager.remove([first])
        wait_until(
            lambda: (v := site_views(service)[NOWHERE])["vanished"] == 1 and v["inactive"] == 1,
            30,
            "the vanished pilot to be noticed and replaced",
        )
        assert store.submissions(NOWHERE)[first] == "vanished"

        # the site whose schedd is down: logged every pass, the service goes on
        down = site_views(service)[DOWN]
        assert down["last"]["error"] and "schedd" in down["last"]["error"]
        log = service.log()
        assert log.count(f"PilotMonitor site {DOWN}") >= 3 and "failed:" in log
        assert f"PilotMonitor site {SITE}" in log and "submit 1" in log

        cli = [sys.executable, "-m", "glidein_ext", "tq"]
        shown = subprocess.run(
            [*cli, "status", "--tq", service.url, "--token", OPERATOR],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        assert "minPilots=1 maxPilots=2 minIdlePilots=0" in shown
        assert "vanished=1" in shown and DOWN in shown

        dry = subprocess.run(
            [
                *cli,
                *("monitor", "--sites", str(sites_file), "--once", "--dry-run"),
                *("--database", service.database, "--tq", service.url),
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            env=tq_env(**CLAIM),
        )
        assert dry.returncode == 1, dry.stderr  # one site failed
        assert f"{SITE}: would submit" in dry.stdout and f"{DOWN}: failed" in dry.stdout
        assert service.process is not None and service.process.poll() is None
    finally:
        service.stop()
        store = Store(make_engine(service.database))
        every = [b for site in (SITE, NOWHERE) for b in store.submissions(site)]
        manager.remove(every)
        store.engine.dispose()
