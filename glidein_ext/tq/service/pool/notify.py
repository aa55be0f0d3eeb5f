"""How one TQ instance of a pool learns what the others changed (Lee 2003, 4.2: notify).

Several ``tq serve`` processes on one PostgreSQL database are one queue.  The database announces
every change a matcher cares about on the channel ``glidein_ext_tq`` (triggers, migration
``0005_pool_notify``: a task queued, taken or ended, a pilot that registered, changed state or
cache, each with its new state), after the commit and only if it commits.  Each instance names its
database sessions (``application_name``), so the payload says who made the change and an
instance skips its own news (its matcher already has it).

``PoolListener`` owns one dedicated connection (psycopg, autocommit) that LISTENs; a pass of its
watched loop waits up to ``window`` seconds for notifications, lets what arrives in the next
``gather`` seconds join the first into one batch, and hands what the batch says to
``Store.absorb``, which updates the matcher and re-reads only the rows the notification cannot
describe.  A broken connection fails the pass (logged, counted in ``/healthz``), and the next pass
connects again and resyncs the whole queue, since notifications sent meanwhile are lost.  A
periodic ``resync`` (``pool_resync`` seconds) is the safety net.  SQLite is one instance: there
is no listener and nothing to notify.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Protocol

import psycopg

from glidein_ext.errors import TaskQueueError
from glidein_ext.tq.service.db import NAME_CHARS, instance_name, is_pool_url, libpq_url, named_url
from glidein_ext.tq.service.store.pool import News, Resync

# The pool's names live in ``tq.service.db`` (``tq serve`` on SQLite never imports psycopg).
__all__ = [
    "CHANNEL",
    "PoolListener",
    "PoolStore",
    "instance_name",
    "is_pool_url",
    "libpq_url",
    "named_url",
    "parse",
]
CHANNEL = "glidein_ext_tq"
log = logging.getLogger("glidein_ext.tq.pool")


class PoolStore(Protocol):
    """What the listener needs of the store (``tq.service.store.pool.PoolView``)."""

    def absorb(self, news: News) -> None: ...

    def resync(self) -> Resync: ...


def parse(payloads: Iterable[str], own: str) -> News:
    """The last state of each row named by a batch of notifications (in commit order), and
    whether this instance (``own``) made it; anything malformed is logged and left out."""
    news = News()
    for payload in payloads:
        ref, state, origin = [*payload.split(" ", 2), "", ""][:3]
        kind, number = ref[:1], ref[1:]
        if kind not in ("t", "p", "P") or not number.isdigit() or not state:
            log.warning("ignoring a malformed pool notification %r", payload[:100])
            continue
        row_id, mine = int(number), origin == own
        if kind == "t":
            news.tasks[row_id] = (state, mine)
        else:
            earlier = news.pilots.get(row_id)
            reread = kind == "P" or (earlier is not None and earlier[2])
            news.pilots[row_id] = (state, mine, reread)
    return news


@dataclass(eq=False)
class PoolListener:
    """The dedicated LISTEN connection of one instance and what it does with what it hears."""

    store: PoolStore
    conninfo: str
    name: str
    _: KW_ONLY
    window: float = 0.5
    gather: float = 0.01
    retry: float = 1.0
    connect: Callable[..., Any] = psycopg.connect
    _conn: Any = field(default=None, init=False)
    connects: int = field(default=0, init=False)
    notifications: int = field(default=0, init=False)
    batches: int = field(default=0, init=False)

    def listen(self) -> None:
        """One pass: connect (and resync) if need be, then absorb what arrives for ``window``
        seconds.  TaskQueueError if the connection cannot be made or breaks."""
        conn = self._connection()
        deadline = time.monotonic() + self.window
        try:
            while (left := deadline - time.monotonic()) > 0:
                batch = [n.payload for n in conn.notifies(timeout=left, stop_after=1)]
                if not batch:
                    return
                time.sleep(self.gather)  # let a burst of news gather: one batch, two wake-ups
                batch.extend(n.payload for n in conn.notifies(timeout=0))
                self.notifications += len(batch)
                self.batches += 1
                self.store.absorb(parse(batch, self.name))
        except psycopg.Error as exc:
            self.close()
            raise TaskQueueError(f"the pool's notification connection broke: {exc}") from exc

    def resync(self) -> Resync:
        """The whole queue re-read; what it changed is logged (a missed notification)."""
        done = self.store.resync()
        if any((done.tasks_added, done.tasks_dropped, done.pilots_added, done.pilots_dropped)):
            log.info(
                "pool resync: tasks +%d -%d, pilots +%d -%d",
                done.tasks_added,
                done.tasks_dropped,
                done.pilots_added,
                done.pilots_dropped,
            )
        return done

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error as exc:
                log.debug("closing the pool's notification connection: %s", exc)

    def _connection(self) -> Any:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        self.close()
        try:
            conn = self.connect(
                self.conninfo,
                autocommit=True,
                application_name=f"{self.name}"[:NAME_CHARS],
                connect_timeout=5,
                keepalives=1,
                keepalives_idle=10,
                keepalives_interval=5,
                keepalives_count=3,
            )
            conn.execute(f"LISTEN {CHANNEL}")
        except psycopg.Error as exc:
            time.sleep(self.retry)  # the loop retries at once: not faster than this
            raise TaskQueueError(f"cannot listen to the pool's notifications: {exc}") from exc
        self.connects += 1
        if self.connects > 1:
            log.warning("pool notifications: connected again; resyncing the whole queue")
        try:
            self.resync()  # whatever changed before LISTEN (or while disconnected)
        except TaskQueueError:
            conn.close()  # listening without the resync would miss those changes: again later
            time.sleep(self.retry)
            raise
        self._conn = conn
        return conn
