"""The claim of a distributed site's master role at the Task Queue (Delgado Peris 2014 §III.B).

A claim is decided by ``sched.election.arbitrate`` and each grant comes with a new epoch, which
the master's later calls (``store.master``: ``sync``, ``assign``) carry: a stale one is refused,
so two masters never both assign.  The old master, which the Task Queue's own record shows silent
for the master timeout, is lost, its task requeued.  The lower-id pilots the claimant says it
could not reach only let it claim: nothing confirms that they are dead (one pilot's word), so
they stay as they are, in the new master's roster, which finds the dead ones by their missed
rounds and a probe (and reports them in ``sync``).  With the grant the new master gets each live
pilot's key for its epoch (``tq.client.pilotkeys``); a master registered with the shared pilot
token gets only the shared token's pilots, never a pilot with its own credential (docs/pool.md).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from glidein_ext.errors import TaskQueueRequestError
from glidein_ext.sched.election import arbitrate
from glidein_ext.tq.client.protocol import Claim, ClaimAnswer, MasterInfo, SitePilot
from glidein_ext.tq.models import Architecture, PilotState
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.store.core import ACTIVE, StoreCore, Tx
from glidein_ext.tq.service.store.pilots import PilotProtocol
from glidein_ext.tq.service.store.sites import (
    SiteCoordination,
    epoch_key_hex,
    set_master,
    site_row,
)


def require_distributed(sites: SiteCoordination, site: str) -> None:
    """The master's calls are for sites of the distributed architecture only."""
    if sites.architecture_of(site) is not Architecture.DISTRIBUTED:
        raise TaskQueueRequestError(f"site {site!r} does not use the distributed architecture")


class MasterClaim:
    """A pilot's claim of its site's master role; works in the caller's transaction."""

    def __init__(self, core: StoreCore, sites: SiteCoordination, pilots: PilotProtocol) -> None:
        self.core = core
        self.sites = sites
        self.pilots = pilots

    def claim_master(self, tx: Tx, site: str, claim: Claim) -> ClaimAnswer:
        """A pilot asks for its site's master role; granted by ``sched.election.arbitrate``."""
        require_distributed(self.sites, site)
        now = self.core.clock()
        conn = tx.conn
        state = site_row(conn, site)
        live = dict(
            conn.execute(
                sa.select(t.pilots.c.id, t.pilots.c.dht_address).where(
                    t.pilots.c.site == site, t.pilots.c.state.in_(ACTIVE)
                )
            ).all()
        )
        seen = state.master_seen
        timeout = self.sites.master_timeout
        alive = state.master_id in live and seen is not None and now - seen <= timeout
        verdict = arbitrate(claim.pilot_id, state.master_id, alive, live, claim.unreachable)
        if not verdict.granted:
            current = None
            if alive and state.master_id is not None:
                address = live[state.master_id] or ""
                current = MasterInfo(state.master_id, address, state.epoch)
            return ClaimAnswer(False, verdict.reason, current, (), round(timeout))
        # The unreachable lower-id pilots are NOT retired: only the Task Queue's own records (the
        # master's silence) end a pilot here; the new master's rounds confirm the others' death.
        gone: set[int] = set()
        old = state.master_id
        if old is not None and old != claim.pilot_id and old in live:
            gone.add(old)  # silent for the master timeout: lost, its task requeued
        epoch = state.epoch + 1
        set_master(conn, site, claim.pilot_id, epoch, now)
        counters = self.sites.counters
        tx.after_commit(functools.partial(counters.on_master, site, claim.pilot_id, epoch, now))
        if gone:
            self.pilots.retire(tx, sorted(gone), PilotState.LOST)  # their tasks: requeued
        where = [t.pilots.c.site == site, t.pilots.c.state.in_(ACTIVE)]
        owner = conn.execute(
            sa.select(t.pilots.c.credential_id).where(t.pilots.c.id == claim.pilot_id)
        ).scalar_one_or_none()
        if owner is None:  # the shared token's master: never a credential's pilots (docs/pool.md)
            where.append(t.pilots.c.credential_id.is_(None))
        # The roster names the claimant too: a task the old master placed on it that never
        # reached it (the master froze between ``assign`` and the hand-out) is released by the
        # new master (``sched.election.lost_own_task``), not left running for ever.
        rows = conn.execute(
            sa.select(t.pilots.c.id, t.pilots.c.dht_address, t.pilots.c.task_id).where(*where)
        ).all()
        attempts = _attempts(conn, [r.task_id for r in rows if r.task_id is not None])
        pilots = tuple(
            SitePilot(
                r.id,
                r.dht_address or "",
                r.task_id,
                attempts.get(r.task_id),
                epoch_key_hex(state, site, r.id, epoch),
            )
            for r in rows
        )
        address = live.get(claim.pilot_id) or ""
        return ClaimAnswer(
            True,
            verdict.reason,
            MasterInfo(claim.pilot_id, address, epoch),
            pilots,
            round(timeout),
        )


def _attempts(conn: Connection, task_ids: Sequence[int]) -> dict[int, int]:
    if not task_ids:
        return {}
    return dict(
        conn.execute(
            sa.select(t.tasks.c.id, t.tasks.c.attempt).where(t.tasks.c.id.in_(task_ids))
        ).all()
    )
