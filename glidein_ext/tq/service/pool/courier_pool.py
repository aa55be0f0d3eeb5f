"""Courier push across a pool of instances (Lee 2003 4.2.3 with 4.2's notify).

An urgent task submitted through one instance must reach an offer standing at another.  The
instances learn of each other's changes through the pool's notifications
(``tq.service.pool.notify``), which hand what changed to the store's ``absorb``; ``CourierFeed``
sits in between: after the store absorbed it, it counts the tasks another instance queued with a
priority at or above the board's threshold and pushes that many of this instance's offers
(``tq.service.pool.courier.OfferBoard``). Without offers it costs nothing more than the absorb.
"""

from __future__ import annotations

import sqlalchemy as sa

from glidein_ext.tq.models import TaskState
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.pool.courier import OfferBoard
from glidein_ext.tq.service.pool.notify import PoolStore
from glidein_ext.tq.service.store import Store
from glidein_ext.tq.service.store.pool import News, Resync


class CourierFeed:
    """A ``PoolStore`` that absorbs into ``store`` and then pushes offers for urgent tasks."""

    def __init__(self, store: Store, board: OfferBoard) -> None:
        self.store: PoolStore = store
        self.engine = store.engine
        self.board = board

    def absorb(self, news: News) -> None:
        self.store.absorb(news)
        queued = sorted(
            task_id
            for task_id, (state, own) in news.tasks.items()
            if state == TaskState.QUEUED.value and not own  # ours were pushed at their submit
        )
        if queued and len(self.board):
            self.board.push(self._urgent(queued))

    def resync(self) -> Resync:
        return self.store.resync()

    def _urgent(self, task_ids: list[int]) -> int:
        """How many of these tasks are queued with a priority worth a push."""
        query = (
            sa.select(sa.func.count())
            .select_from(t.tasks)
            .where(
                t.tasks.c.id.in_(task_ids),
                t.tasks.c.state == TaskState.QUEUED.value,
                t.tasks.c.priority >= self.board.threshold,
            )
        )
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())
