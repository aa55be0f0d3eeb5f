"""The PilotMonitor's bookkeeping (Hasham 2011 §IV-A): pilots submitted per site and their fate.

A submission is recorded ``inactive`` when the PilotManager submits a pilot, becomes
``registered`` when that pilot registers (``PilotProtocol.register``, by its batch id) and
``vanished`` when it left the batch queue without registering.  These are the store's side of
``tq.manager.monitor.MonitorStore``.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from glidein_ext.tq.manager.monitor import SiteView
from glidein_ext.tq.models import PilotInfo, PilotState
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.store.core import StoreCore, Tx

INACTIVE = "inactive"


class MonitorBookkeeping:
    """What the PilotMonitor reads and records, in the caller's transaction."""

    def __init__(self, core: StoreCore) -> None:
        self.core = core

    def record_submission(self, tx: Tx, batch_id: str, site: str) -> None:
        tx.conn.execute(
            sa.insert(t.submissions).values(
                batch_id=batch_id, site=site, submitted_at=self.core.clock(), state=INACTIVE
            )
        )

    def submissions(self, conn: Connection, site: str) -> dict[str, str]:
        """Batch id -> inactive, registered or vanished, for every pilot submitted to ``site``."""
        query = sa.select(t.submissions.c.batch_id, t.submissions.c.state).where(
            t.submissions.c.site == site
        )
        return {row[0]: row[1] for row in conn.execute(query)}

    def mark_vanished(self, tx: Tx, batch_ids: Iterable[str]) -> None:
        """Submitted pilots that left the batch queue without registering; the credentials the
        PilotManager gave their jobs are revoked (nobody should hold them any more)."""
        now = self.core.clock()
        conn = tx.conn
        for batch_id in batch_ids:
            conn.execute(
                t.submissions.update()
                .where(t.submissions.c.batch_id == batch_id, t.submissions.c.state == INACTIVE)
                .values(state="vanished")
            )
            conn.execute(
                t.credentials.update()
                .where(t.credentials.c.batch_id == batch_id, t.credentials.c.revoked_at.is_(None))
                .values(revoked_at=now)
            )

    def site_view(self, conn: Connection, site: str) -> SiteView:
        """The site's pilots inactive, idle and busy (``queued_groups`` is left empty: see
        ``queued_groups_for``)."""
        states: dict[str, int] = dict(
            conn.execute(
                sa.select(t.pilots.c.state, sa.func.count())
                .where(t.pilots.c.site == site)
                .group_by(t.pilots.c.state)
            ).all()
        )
        submitted = self.submissions(conn, site).values()
        inactive = sum(1 for state in submitted if state == INACTIVE)
        return SiteView(
            inactive=inactive,
            idle=states.get(PilotState.IDLE.value, 0),
            busy=states.get(PilotState.BUSY.value, 0),
        )

    def queued_groups_for(self, template: PilotInfo, now: float) -> list[int]:
        """Queued tasks per match group that a pilot like ``template`` could run (the matcher
        only: the caller holds the store's lock)."""
        return self.core.matcher.queued_groups_for(template, now)
