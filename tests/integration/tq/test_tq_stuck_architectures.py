"""Stuck work is found from the database whatever the sites' architecture (pre-DHT,
centralized, distributed): a real store on a SQLite file, a pilot registered idle at a site of
each architecture, a task it may run left queued; the stuck-work snapshot names the pilot and the
detector warns once the threshold has passed.  Also: why a queued task waits."""

from __future__ import annotations

from pathlib import Path

import pytest

from glidein_ext.tq.client.protocol import Registration
from glidein_ext.tq.service.server import open_store
from glidein_ext.tq.service.settings import TqSettings
from glidein_ext.tq.service.watch import insight
from glidein_ext.tq.service.watch.stuck import QUEUED_IDLE, StuckDetector, Thresholds
from glidein_ext.tq.workflow import parse_workflow


@pytest.mark.parametrize("architecture", ["pre-dht", "centralized", "distributed"])
def test_queued_while_a_matching_pilot_stays_idle_at_every_architecture(
    tmp_path: Path, architecture: str
) -> None:
    settings = TqSettings(database=str(tmp_path / "tq.sqlite"), architecture=architecture)
    store = open_store(settings)
    try:
        idle = store.register(Registration(site="T1", host="h1", memory=100, disk=100))
        elsewhere = store.register(
            Registration(site="T2", host="h2", requirements='TARGET.Owner == "nobody"')
        )
        store.submit(parse_workflow({"name": "w", "tasks": [{"name": "t", "command": "true"}]}))
        now = store.clock()
        snapshot = insight.stuck_snapshot(store.engine, now)
        (queued,) = snapshot.queued
        assert queued.idle_matches == (idle.pilot_id,)  # not the pilot whose Requirements refuse
        assert elsewhere.pilot_id not in queued.idle_matches
        detector = StuckDetector(Thresholds(queued_after=60))
        assert detector.observe(snapshot) == []
        later = insight.stuck_snapshot(store.engine, now + 61)
        (warning,) = detector.observe(later)
        assert warning.kind == QUEUED_IDLE and warning.subject == f"task {queued.task_id}"
    finally:
        store.engine.dispose()


def test_why_a_queued_task_waits(tmp_path: Path) -> None:
    store = open_store(TqSettings(database=str(tmp_path / "tq.sqlite"), wait_for_data=600))
    try:
        store.submit(
            parse_workflow(
                {
                    "name": "w",
                    "available": ["/in/a"],
                    "tasks": [
                        {"name": "big", "command": "true", "request_memory": 5000},
                        {"name": "reads", "command": "true", "inputs": ["/in/a"]},
                        {"name": "after", "command": "true", "after": ["big"]},
                    ],
                }
            )
        )
        ids = {row.name: row.id for row in store.task_rows()}

        def why(name: str) -> str:
            detail = insight.task_detail(
                store.engine, ids[name], store.clock(), 600, lambda _site: "pre-dht"
            )
            return str(detail["why"])

        assert why("big").startswith("no matching pilot: no pilot")
        assert why("after").startswith("waiting for task(s) ")
        small = store.register(Registration(site="T1", host="h1", memory=100, disk=100))
        assert "none of the 1 live pilot(s) (T1=1)" in why("big")
        holder = store.register(
            Registration(site="T1", host="h2", memory=100, disk=100, cached=("/in/a",))
        )
        assert why("reads").startswith(
            f"waiting for data: held for idle pilot(s) {holder.pilot_id}"
        )
        assert small.pilot_id != holder.pilot_id
    finally:
        store.engine.dispose()
