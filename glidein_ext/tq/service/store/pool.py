"""One live queue over a pool of TQ instances (Lee 2003, 4.2: notify): the matcher follows the
database.

Every instance of a pool keeps its own matcher; what another instance changed reaches it as a
notification naming the row and its new state (``tq.service.pool.notify``), and ``absorb`` makes the
matcher agree: a task taken or ended elsewhere is dropped, a queued task the matcher lacks is read;
a pilot that left is dropped, one that turned idle or busy is flagged so, a new pilot or a changed
cache list is read (its ad rebuilt only if what it registered changed).  This instance's own
news is skipped, except a queued task its matcher lacks (dropped by an older notification that
arrived after this instance requeued it).  ``resync`` does the same for the whole queue (the
safety net: a notification lost with a broken connection).  Both work under the store's lock
(``Store.absorb``, ``Store.resync``), so a change this process commits cannot slip between a read
and the matcher's update.

A stale entry is harmless: a task the matcher still holds but another instance took is refused
by the take (``state = 'queued'``) and dropped; only a missing queued task would delay work, and
the next notification or resync restores it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from glidein_ext.tq.models import PilotInfo, PilotState, TaskState
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.store.core import ACTIVE, StoreCore, pilot_info, queued_task

ID_CHUNK = 1000  # ids per IN (...) clause


@dataclass(frozen=True)
class Resync:
    """What a resync changed in the matcher (a non-zero count means a notification was missed,
    or a change was still in flight)."""

    tasks_added: int
    tasks_dropped: int
    pilots_added: int
    pilots_dropped: int


@dataclass
class News:
    """What a batch of notifications says, per row: its last state, whether this instance made
    that change (``own``), and, for a pilot, whether its row must be re-read (new, or its cache
    changed)."""

    tasks: dict[int, tuple[str, bool]] = field(default_factory=dict)
    pilots: dict[int, tuple[str, bool, bool]] = field(default_factory=dict)


class PoolView:
    """The matcher kept in step with the database that other instances also write; the caller
    holds the store's lock."""

    def __init__(self, core: StoreCore) -> None:
        self.core = core

    def absorb(self, news: News) -> tuple[list[int], list[int]]:
        """Make the matcher agree with what other instances changed; what it must re-read (the
        tasks, the pilots), because the notification cannot say it (a queued task not held, a
        new pilot, a changed cache)."""
        read_tasks = []
        for task_id, (state, own) in news.tasks.items():
            if state == TaskState.QUEUED.value:
                if task_id not in self.core.matcher:
                    read_tasks.append(task_id)  # released, requeued, or dropped too early
            elif not own:
                self.core.matcher.remove_task(task_id)  # taken or ended elsewhere
        read_pilots = []
        for pilot_id, (state, own, reread) in news.pilots.items():
            held = self.core.matcher.pilot(pilot_id) is not None
            if state not in ACTIVE:
                if not own:
                    self.core.matcher.remove_pilot(pilot_id)
            elif not held or (reread and not own):
                read_pilots.append(pilot_id)
            elif not own:
                self.core.matcher.set_idle(pilot_id, state == PilotState.IDLE.value)
        return sorted(read_tasks), sorted(read_pilots)

    def reread(self, conn: Connection, tasks: Sequence[int], pilots: Sequence[int]) -> None:
        """These tasks and pilots, read from the database into the matcher."""
        for chunk in _chunks(tasks):
            rows = conn.execute(_BY_IDS["tasks"], {"ids": chunk}).all()
            queued = {row.id: row for row in rows if row.state == TaskState.QUEUED.value}
            for task_id in chunk:
                row = queued.get(task_id)
                if row is None:
                    self.core.matcher.remove_task(task_id)
                else:
                    self.core.admit_task(queued_task(row))
        for chunk in _chunks(pilots):
            rows = conn.execute(_BY_IDS["pilots"], {"ids": chunk}).all()
            live = {row.id: row for row in rows if row.state in ACTIVE}
            for pilot_id in chunk:
                row = live.get(pilot_id)
                if row is None:
                    self.core.matcher.remove_pilot(pilot_id)
                else:
                    self._refresh_pilot(row)

    def resync(self, conn: Connection) -> Resync:
        """The whole queue and every live pilot, re-read (the safety net of notification)."""
        queued = set(
            conn.execute(
                sa.select(t.tasks.c.id).where(t.tasks.c.state == TaskState.QUEUED.value)
            ).scalars()
        )
        held = self.core.matcher.task_ids()
        for task_id in held - queued:
            self.core.matcher.remove_task(task_id)
        missing = sorted(queued - held)
        for row in _rows(conn, t.tasks, missing):
            if row.state == TaskState.QUEUED.value:
                self.core.admit_task(queued_task(row))
        live = conn.execute(sa.select(t.pilots).where(t.pilots.c.state.in_(ACTIVE))).all()
        known = self.core.matcher.pilot_ids()
        for pilot_id in known - {row.id for row in live}:
            self.core.matcher.remove_pilot(pilot_id)
        for row in live:
            self._refresh_pilot(row)
        return Resync(
            tasks_added=len(missing),
            tasks_dropped=len(held - queued),
            pilots_added=len({row.id for row in live} - known),
            pilots_dropped=len(known - {row.id for row in live}),
        )

    def _refresh_pilot(self, row: Any) -> None:
        """A live pilot's row into the matcher: its idle flag and cache list; its ad rebuilt
        only when what it registered differs (rebuilding drops its cached verdicts)."""
        held = self.core.matcher.pilot(row.id)
        if held is None:
            self.core.admit_pilot(row)
            return
        info = pilot_info(row)
        if _registered(held) != _registered(info):
            self.core.admit_pilot(row)
            return
        self.core.matcher.set_idle(info.pilot_id, info.idle)
        if held.cached != info.cached:
            self.core.matcher.set_cache(info.pilot_id, info.cached)


def _registered(info: PilotInfo) -> tuple[object, ...]:
    """What a pilot's ad is built from (everything but its idle flag and cache)."""
    return (
        info.site,
        info.host,
        info.se,
        info.cpus,
        info.memory,
        info.disk,
        info.expires_at,
        sorted(info.attributes.items()),
        info.requirements,
        info.rank,
    )


def _chunks(ids: Sequence[int]) -> Iterable[list[int]]:
    for start in range(0, len(ids), ID_CHUNK):
        yield list(ids[start : start + ID_CHUNK])


def _rows(conn: Connection, table: sa.Table, ids: Sequence[int]) -> Iterable[Any]:
    for chunk in _chunks(ids):
        yield from conn.execute(_BY_IDS[table.name], {"ids": chunk})


# The rows of some ids, built once: each instance of a pool re-reads what the others changed
# (a pilot registered elsewhere, a task released), and building a statement costs more than
# running it (``statements``).
_BY_IDS = {
    table.name: sa.select(table).where(table.c.id.in_(sa.bindparam("ids", expanding=True)))
    for table in (t.tasks, t.pilots)
}
