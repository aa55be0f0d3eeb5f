"""PilotMonitor + PilotManager against the chroot's real schedd: pilots submitted, registered.

Each pilot job carries its own credential (minted by the PilotManager, spooled with the job as a
private file, never in the job ad); the pilots have no shared token at all.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from glidein_ext.sandbox.pool import CondorSandbox, Glidein
from glidein_ext.tq.manager.monitor import SitePolicy, Thresholds, monitor_cycle
from glidein_ext.tq.manager.pilot_submit import PilotJob, PilotManager
from glidein_ext.tq.service.db import make_engine
from glidein_ext.tq.service.store import Store

pytestmark = pytest.mark.condor
POOL = "127.0.0.1:9618"


@pytest.fixture
def glidein(sandbox: CondorSandbox) -> Iterator[Glidein]:
    started = sandbox.start_glidein("tq-pilots", 2, cron_period=5, lifetime="30m")
    yield started
    started.stop()


@pytest.mark.usefixtures("claim_to_be_glidein")
def test_pilot_manager_submits_pilots_that_register_and_work(
    sandbox: CondorSandbox,
    glidein: Glidein,
    tq_server: Callable[..., Any],
    wait_until: Callable[..., Any],
) -> None:
    server = tq_server()
    site = "T2_CHROOT"
    server.operator().submit(
        {
            "name": "managed",
            "tasks": [
                {"name": f"t{i}", "command": "true", "requirements": f'TARGET.Site == "{site}"'}
                for i in range(4)
            ],
        }
    )
    workdir = sandbox.make_dir(f"tq-pilots-{os.getpid()}")
    job = PilotJob(
        tq_url=server.url,
        workdir_base=workdir,
        executable="/opt/glidein-ext/bin/glidein-ext",
        requirements=f'TARGET.GLIDEIN_ExtName =?= "{glidein.name}"',
        extra_args=("--max-idle", "5", "--poll", "0.5", "--min-free-mb", "1", "--host", "wn-c"),
        environment={"PATH": "/usr/bin:/bin"},  # no shared pilot token: their own credential
        request_memory=128,
    )
    store = Store(make_engine(server.database))
    store.load()
    manager = PilotManager(POOL, credentials=store)
    policy = SitePolicy(site, Thresholds(min_pilots=0, max_pilots=2, min_idle_pilots=0), job)
    try:
        assert monitor_cycle(store, manager, [policy], time.time()) == {site: 2}
        batch_ids = set(store.submissions(site))
        assert len(batch_ids) == 2
        credentials = {c.batch_id: c for c in store.credentials()}
        assert set(credentials) == batch_ids and {c.site for c in credentials.values()} == {site}
        # the job ads name their credential, never its secret
        clusters = " || ".join(f"ClusterId == {b.split('.')[0]}" for b in batch_ids)
        ads = sandbox.queue(clusters)
        assert {f"{ad['ClusterId']}.{ad['ProcId']}" for ad in ads} == batch_ids
        for ad in ads:
            batch = f"{ad['ClusterId']}.{ad['ProcId']}"
            assert ad["GlideinExtTqCredential"] == credentials[batch].id
            arguments = ad.get("Arguments") or ad.get("Args") or ""
            assert "gxp_" not in json.dumps(ad) and "--token-file tq-credential" in arguments
        # both stay counted (inactive, then registered): a second pass sends no more
        assert monitor_cycle(store, manager, [policy], time.time()) == {site: 0}
        wait_until(
            lambda: set(store.submissions(site).values()) == {"registered"},
            180,
            "the submitted pilots to register with the TQ",
        )
        status = wait_until(
            lambda: (s := server.operator().status()).workflows[0].tasks["done"] == 4 and s,
            120,
            "the pilots to run the site's tasks",
        )
        assert status.completions == 4
        with store.engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT batch_id, site, credential_id FROM pilots").all()
        assert {r[0] for r in rows} == batch_ids and {r[1] for r in rows} == {site}
        # each registered with the credential its own job carried
        assert {(r[0], r[2]) for r in rows} == {(b, c.id) for b, c in credentials.items()}

        # a pilot that never runs, removed from the queue: noticed, and replaced (minPilots)
        never = SitePolicy(
            "T3_NOWHERE",
            Thresholds(min_pilots=1, max_pilots=1),
            PilotJob(server.url, workdir_base=workdir, requirements="false"),
        )
        assert monitor_cycle(store, manager, [never], time.time()) == {"T3_NOWHERE": 1}
        (first,) = store.submissions("T3_NOWHERE")
        assert store.site_view("T3_NOWHERE").inactive == 1
        manager.remove([first])
        wait_until(lambda: not manager.alive([first]), 60, "the removal")
        assert monitor_cycle(store, manager, [never], time.time()) == {"T3_NOWHERE": 1}
        assert store.submissions("T3_NOWHERE")[first] == "vanished"
        states = {c.batch_id: c.state(time.time()) for c in store.credentials()}
        assert states[first] == "revoked"  # nobody should hold a vanished job's credential
    finally:
        every = list(store.submissions(site)) + list(store.submissions("T3_NOWHERE"))
        manager.remove(every)
        store.engine.dispose()
