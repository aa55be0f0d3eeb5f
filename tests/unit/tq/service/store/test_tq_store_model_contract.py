"""The in-memory Task Queue of the distributed site's schedule explorer
(``tests/support/site_model.py``) is held to the store's rules: the same calls on both give the
same answers, so a schedule the explorer passes is one the real Task Queue would pass too."""

from __future__ import annotations

from pathlib import Path

from glidein_ext.distributed import master_state as ms
from glidein_ext.tq.client.protocol import (
    Claim,
    Pair,
    Registration,
    RoundReport,
    SiteAssign,
    SitePilot,
    SiteSync,
)
from glidein_ext.tq.models import Architecture
from glidein_ext.tq.service.db import make_engine, migrate
from glidein_ext.tq.service.store import Store
from glidein_ext.tq.workflow import generate, parse_workflow
from tests.support.clock import Clock
from tests.support.site_model import MASTER_TIMEOUT, ModelTaskQueue


def _roster(pilots: tuple[SitePilot, ...], task_of: dict[int, int]) -> dict[int, int | None]:
    """A claim's roster as {pilot: the index of its task in the round} (ids differ)."""
    out: dict[int, int | None] = {}
    for p in pilots:
        task = p.task_id
        out[p.pilot_id] = None if task is None else task_of[task]
    return out


def test_a_claim_names_every_live_pilot_with_its_task_the_claimant_too(tmp_path: Path) -> None:
    """Master 1 places a task on pilots 2 and 3, then falls silent; pilot 2 claims the role.
    Both Task Queues grant it and list pilots 2, 3 and 4 (the claimant with the task it may never
    have got: its own core releases it) and never the old master, now lost."""
    clock = Clock()
    engine = make_engine(str(tmp_path / "tq.sqlite"))
    migrate(engine)
    architecture = Architecture.DISTRIBUTED
    store = Store(
        engine, clock=clock, master_timeout=int(MASTER_TIMEOUT), default_architecture=architecture
    )
    store.load()
    model = ModelTaskQueue(tasks=4)
    try:
        ids = []
        for i in range(4):
            registration = Registration(site="S", host=f"wn{i}", dht_address=f"10.0.0.{i}:4000")
            answer = store.register(registration)
            ids.append(answer.pilot_id)
            model.register(answer.pilot_id, 0.0)
        master = ids[0]
        store.submit(parse_workflow(generate("w1", scale=4 / 80)))
        offers = [o.task_id for o in store.sync("S", SiteSync(master, 1, want=2)).tasks]
        real = [Pair(offers[0], ids[1]), Pair(offers[1], ids[2])]
        store.assign("S", SiteAssign(master, 1, tuple(real), RoundReport(2.0)))
        modelled = (Pair(1, ids[1]), Pair(2, ids[2]))
        model.assign(master, 1, ms.CallAssign(1, modelled, RoundReport(2.0), ()), 0.0)
        clock.now += MASTER_TIMEOUT + 1
        granted = store.claim_master("S", Claim(ids[1]))
        model_granted, view, model_pilots = model.claim(ids[1], (), MASTER_TIMEOUT + 1)
        assert granted.granted and model_granted
        assert granted.master is not None and view is not None
        assert granted.master.epoch == view.epoch == 2
        expected = {ids[1]: 0, ids[2]: 1, ids[3]: None}
        assert _roster(granted.pilots, {offers[0]: 0, offers[1]: 1}) == expected
        assert _roster(model_pilots, {1: 0, 2: 1}) == expected
    finally:
        engine.dispose()
