"""A sync's offers with the unheld tasks read in SQL (``store.offers._UnheldRows``) are the
offers of the whole queue read row by row, on SQLite and PostgreSQL."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from glidein_ext.tq.client import protocol as proto
from glidein_ext.tq.models import Architecture
from glidein_ext.tq.service.store import Store
from glidein_ext.tq.service.store.offers import SiteOffers
from glidein_ext.tq.workflow import generate, parse_workflow
from tests.support.clock import Clock

SITES = ("S", "T", "U")


Masters = dict[str, tuple[int, int, list[int]]]  # site -> (master, epoch, its workers)


def _queue(store: Store, masters: Masters, draw: random.Random) -> None:
    """Independent tasks of two specs and two priorities, one only T's pilots match, and W1's
    chains (of the first spec), some of whose first steps ran at S or T: their successors'
    inputs were made there, so they are no unheld tasks though of the same spec."""
    kinds = [("true", 0), ('TARGET.Site == "T"', 0), ("true", 1), ("true", 0)]
    draw.shuffle(kinds)  # the oldest unheld task's spec is the one read in SQL
    for n, (requirements, priority) in enumerate(kinds):
        count = draw.randint(20, 90)
        tasks = [{"name": f"x{i}", "command": "true"} for i in range(count)]
        defaults = {"requirements": requirements, "priority": priority}
        store.submit(parse_workflow({"name": f"i{n}", "defaults": defaults, "tasks": tasks}))
    w1 = generate("w1", scale=draw.choice([0.2, 0.4]))
    w1["defaults"]["max_runtime"] = 3600  # the spec of the independent tasks of "true"
    store.submit(parse_workflow(w1))
    for site in ("S", "T"):
        master = masters[site]
        offers = store.sync(site, proto.SiteSync(master[0], master[1], want=200)).tasks
        chains = [o for o in offers if o.outputs][: draw.randint(1, 6)]
        pairs = tuple(proto.Pair(o.task_id, p) for o, p in zip(chains, master[2], strict=False))
        placed = store.assign(
            site, proto.SiteAssign(master[0], master[1], pairs, proto.RoundReport())
        ).accepted
        outputs = {o.task_id: o.outputs for o in chains}
        done = tuple(
            proto.SiteCompletion(
                p.pilot_id, proto.Completion(p.task_id, p.attempt, 0, outputs[p.task_id])
            )
            for p in placed
        )
        store.sync(site, proto.SiteSync(master[0], master[1], done))


def _register(store: Store, draw: random.Random) -> Masters:
    """Two to four pilots at each site; the first is its master."""
    sites: Masters = {}
    for n, site in enumerate(SITES):
        answers = [
            store.register(
                proto.Registration(site=site, host=f"{site}{i}", dht_address=f"10.0.{n}.{i}:1")
            )
            for i in range(draw.randint(2, 4))
        ]
        master = answers[0].master
        assert master is not None
        sites[site] = (master.pilot_id, master.epoch, [a.pilot_id for a in answers[1:]])
    return sites


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_the_unheld_read_in_sql_gives_the_offers_of_the_whole_queue(
    store_for: Callable[..., Store], seed: int
) -> None:
    draw = random.Random(seed)
    store = store_for(Clock(), default_architecture=Architecture.DISTRIBUTED)
    _queue(store, _register(store, draw), draw)
    core, sites = store._core, store._sites  # the offers, built twice
    indexed, whole = SiteOffers(core, sites), SiteOffers(core, sites, index_unheld=False)
    compared = 0
    with store.engine.connect() as conn:
        for site in SITES:
            for want in (0, 1, 7, 40, 500):
                got = indexed.runnable(conn, site, want)
                expected = whole.runnable(conn, site, want)
                assert got == expected, (site, want)
                compared += len(got[0])
        (unheld,) = conn.execute(  # the index had something to do
            sa.text("SELECT count(*) FROM tasks WHERE state = 'queued' AND priority = 0")
        ).one()
        shared = [o for o in indexed.runnable(conn, "T", 40)[0] if o.shared]
    assert unheld > 20 and compared > 100
    assert shared  # T is offered other sites' shares too, marked


def test_a_queue_without_unheld_tasks_is_read_whole(store_for: Callable[..., Store]) -> None:
    """Every queued task of priority 1: nothing to index, the same offers as before."""
    store = store_for(Clock(), default_architecture=Architecture.DISTRIBUTED)
    _register(store, random.Random(5))
    tasks = [{"name": f"x{i}", "command": "true"} for i in range(30)]
    store.submit(parse_workflow({"name": "p", "defaults": {"priority": 1}, "tasks": tasks}))
    core, sites = store._core, store._sites
    with store.engine.connect() as conn:
        got = SiteOffers(core, sites).runnable(conn, "S", 10)
        assert got == SiteOffers(core, sites, index_unheld=False).runnable(conn, "S", 10)
    assert len(got[0]) == 10 and got[1] == 30
