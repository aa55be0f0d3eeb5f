"""The distributed architecture's master calls at the Task Queue (Delgado Peris 2014 §III.B):
``sync`` and ``assign`` (the claim of the role: ``store.claim``).

The master of a distributed site calls the Task Queue for its whole site: ``sync`` carries the
workers' completions, the workers it found dead, the tasks it could not deliver, and how many of
the site's runnable tasks it wants (0: a heartbeat); ``assign`` carries a round's pairs, each task
taken atomically (``state = 'queued'``) and each pilot given one task at most.  Both carry the
epoch the Task Queue handed out with the role: a stale one is refused (StaleMasterError, HTTP
409), so two masters never both assign; an accepted call vouches for the site's pilots (their
``last_seen``: only the master heartbeats).  ``sync`` answers the keys of the pilots the master
asks about (those it met since its claim) and names those that are no live pilots of the site any
more (revoked, gone: the master tells them to leave).

A master registered with the shared pilot token acts for the shared token's pilots only, never
for a pilot registered with its own credential (docs/pool.md: the shared token may not act on a
credential's pilots): such a pair is refused and such a completion answered ``refused``, each
with the reason; such pilots are not declared dead, their tasks not released, their keys not
handed out.  A master with a credential of the site acts for every pilot of the site.

What ``sync`` offers is chosen by ``store.offers`` (``sched.offers.choose_offers``).  ``assign``
checks every pair both ways, as the pre-DHT matcher does (``tq.service.matching.matcher``,
``store.offers.mismatch``): a refused pair says why in the answer (``Refused``) and in the
counters.  An accepted pair names its task's successors (``store.successors``); a round
that offers only those makes no ``sync``, and its ``assign`` carries the completions, recorded
before the pairs are checked (``sched.stock``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from glidein_ext.errors import StaleMasterError, TaskQueueNotFound
from glidein_ext.tq.client.protocol import (
    CompletionAnswer,
    Pair,
    PilotKey,
    Placed,
    Refused,
    SiteAssign,
    SiteAssignAnswer,
    SiteCompletion,
    SiteSync,
    SiteSyncAnswer,
)
from glidein_ext.tq.models import PilotState, QueuedTask, TaskState
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.store.claim import require_distributed
from glidein_ext.tq.service.store.core import (
    ACTIVE,
    StoreCore,
    Tx,
    pilot_info,
    reread_queued,
    spec_of,
)
from glidein_ext.tq.service.store.direct import run
from glidein_ext.tq.service.store.offers import SiteOffers, mismatch
from glidein_ext.tq.service.store.pilots import TAKE_ONE, PilotProtocol
from glidein_ext.tq.service.store.sites import SiteCoordination, epoch_key_hex, pilot_row, site_row
from glidein_ext.tq.service.store.statements import constant_in, row_by_id, update_row
from glidein_ext.tq.service.store.successors import successors

# ``assign``'s statement for a pair's task, built once (``statements``); its take is the pilot
# protocol's take of one task by id (``pilots.TAKE_ONE``).
_NOT_SHARED = "pilot {pilot} has its own credential: the shared token's master cannot act for it"
_TASK = sa.select(t.tasks.c.state, t.tasks.c.spec).where(t.tasks.c.id == sa.bindparam("task"))
# Every master call's check and vouching (``_check_master``), and a named pilot's membership
# (``_site_pilots``), built once.
_SITE_STATE = (
    sa.select(t.site_state.c.master_id, t.site_state.c.epoch)
    .where(t.site_state.c.site == sa.bindparam("site_"))
    .with_for_update()
)
_MASTER_SEEN = (
    t.site_state.update()
    .where(t.site_state.c.site == sa.bindparam("site_"))
    .values(master_seen=sa.bindparam("now_"))
)
_VOUCHED = (
    t.pilots.update()
    .where(t.pilots.c.site == sa.bindparam("site_"), constant_in(t.pilots.c.state, ACTIVE))
    .values(last_seen=sa.bindparam("now_"))
)
_BY_ONE = 32  # pilots looked up one by one (each a prepared statement); more: one IN (...)
_MEMBER = sa.select(t.pilots.c.site, t.pilots.c.state, t.pilots.c.credential_id).where(
    t.pilots.c.id == sa.bindparam("pilot")
)


class MasterCalls:
    """The calls of a distributed site's master, over the site DHT (``sites``) and the pilot
    protocol; each method works in the caller's transaction."""

    def __init__(self, core: StoreCore, sites: SiteCoordination, pilots: PilotProtocol) -> None:
        self.core = core
        self.sites = sites
        self.pilots = pilots
        self.offers = SiteOffers(core, sites)

    def sync(self, tx: Tx, site: str, call: SiteSync) -> SiteSyncAnswer:
        """The master's bulk call: completions, dead workers, undelivered tasks, and (``want``)
        the site's runnable tasks.  Also its heartbeat, for itself and its workers."""
        shared = self.vouch(tx, site, call.pilot_id, call.epoch)
        if call.phases:  # the master's round phases, for the counters
            tx.after_commit(functools.partial(self.sites.counters.on_phases, site, call.phases))
        dead = _ours(self._site_pilots(tx.conn, site, call.dead), shared)
        if dead:
            self.pilots.retire(tx, dead, PilotState.LOST)
        results = self._complete(tx, site, call.completions, shared)
        self._release(tx, site, call.release, shared)
        keys, gone = self._keys(tx.conn, site, call.epoch, call.pilots, shared)
        offers, queued = self.offers.runnable(tx.conn, site, call.want)
        return SiteSyncAnswer(tuple(offers), results, queued, keys, gone)

    def assign(self, tx: Tx, site: str, call: SiteAssign) -> SiteAssignAnswer:
        """The round's pairs; each task taken atomically, each pilot given one task at most, each
        pair checked both ways (Requirements, resources, life) as the pre-DHT matcher checks it;
        a refused pair is answered with its reason, an accepted one with its task's
        successors."""
        now = self.core.clock()
        conn = tx.conn
        shared = self._check_master(conn, site, call.pilot_id, call.epoch, now)
        # A round without a sync: its completions first (they free the workers and queue the
        # successors its pairs name), as sync records them.
        results = self._complete(tx, site, call.completions, shared)
        taken, refused = self._take(conn, site, call.pairs, now, shared)
        went_to = {item.task_id: pilot for item, pilot in taken}
        found = successors(conn, went_to, now, self.core.matcher)
        accepted = [Placed(p.task_id, p.pilot_id, p.attempt, *found[p.task_id]) for p, _ in taken]

        def placed() -> None:
            for item in accepted:
                self.core.matcher.remove_task(item.task_id)
                self.core.matcher.set_idle(item.pilot_id, False)
            report = call.round
            compared = (report.compared_sum, report.compared_served)
            counters = self.sites.counters
            counters.on_round(report.rank_sum, report.served, compared)
            for _, kind in refused:
                counters.on_refused(kind)

        tx.after_commit(placed)
        refusals = tuple(item for item, _ in refused)
        return SiteAssignAnswer(tuple(accepted), refusals, results)

    def _take(
        self, conn: Connection, site: str, pairs: Sequence[Pair], now: float, shared: bool
    ) -> tuple[list[tuple[Placed, Any]], list[tuple[Refused, str]]]:
        """Each pair checked and its task taken: (the accepted, with the pilot's row), and (the
        refused, with the counter of its reason).  ``shared``: the master holds the shared
        pilot token, and a pilot with its own credential is not its to assign."""
        accepted: list[tuple[Placed, Any]] = []
        refused: list[tuple[Refused, str]] = []
        given: set[int] = set()
        for pair in pairs:

            def refuse(kind: str, reason: str, pair: Any = pair) -> None:
                refused.append((Refused(pair.task_id, pair.pilot_id, reason[:200]), kind))

            if pair.pilot_id in given:
                refuse("pilot", f"pilot {pair.pilot_id} was given a task already in this call")
                continue
            pilot = row_by_id(conn, t.pilots, pair.pilot_id, locked=True)
            if pilot is None or pilot.site != site or pilot.state not in ACTIVE:
                refuse("pilot", f"pilot {pair.pilot_id} is no live pilot of {site}")
                continue
            if shared and pilot.credential_id is not None:
                refuse("pilot", _NOT_SHARED.format(pilot=pair.pilot_id))
                continue
            if pilot.task_id is not None:
                refuse("pilot", f"pilot {pair.pilot_id} runs task {pilot.task_id}")
                continue
            task = run(conn, _TASK, {"task": pair.task_id}).one_or_none()
            if task is None or task.state != TaskState.QUEUED.value:
                state = "unknown" if task is None else task.state
                refuse("task", f"task {pair.task_id} is {state}, not queued")
                continue
            why = mismatch(spec_of(task), pilot_info(pilot), now, matcher=self.core.matcher)
            if why is not None:
                refuse("match", f"task {pair.task_id} and pilot {pair.pilot_id}: {why}")
                continue
            row = run(conn, TAKE_ONE, {"c0": pair.task_id, "pilot": pair.pilot_id}).one_or_none()
            if row is None:
                refuse("task", f"task {pair.task_id} is no longer queued")
                continue
            busy = {"state": PilotState.BUSY.value, "task_id": pair.task_id, "last_seen": now}
            update_row(conn, t.pilots, pair.pilot_id, busy)
            given.add(pair.pilot_id)
            accepted.append((Placed(pair.task_id, pair.pilot_id, row.attempt), pilot))
        return accepted, refused

    # --- helpers -----------------------------------------------------------------------------

    def _complete(
        self, tx: Tx, site: str, completions: Sequence[SiteCompletion], shared: bool
    ) -> tuple[CompletionAnswer, ...]:
        """The workers' completions the master reports, each answered in order; a master
        reports for its own site's live pilots only (``shared``: for the shared token's)."""
        results = []
        named = [item.pilot_id for item in completions]
        members = self._site_pilots(tx.conn, site, named)
        ours = set(_ours(members, shared))
        for item in completions:
            if item.pilot_id not in members:
                answer = f"unknown: pilot {item.pilot_id} is no live pilot of {site}"
                results.append(CompletionAnswer(False, False, answer[:100]))
                continue
            if item.pilot_id not in ours:
                answer = "refused: " + _NOT_SHARED.format(pilot=item.pilot_id)
                results.append(CompletionAnswer(False, False, answer[:100]))
                continue
            try:
                results.append(self.sites.complete(tx, item.pilot_id, item.completion))
            except TaskQueueNotFound as exc:
                results.append(CompletionAnswer(False, False, f"unknown: {exc}"[:100]))
        return tuple(results)

    def _check_master(
        self, conn: Connection, site: str, pilot_id: int, epoch: int, now: float
    ) -> bool:
        """The call comes from the site's master of this epoch, or StaleMasterError; it vouches
        for the master and its site's pilots (only the master heartbeats).  True: the master
        registered with the shared pilot token."""
        state = run(conn, _SITE_STATE, {"site_": site}).one_or_none()
        if state is None or state.master_id != pilot_id or state.epoch != epoch:
            current = "none" if state is None else f"pilot {state.master_id}, epoch {state.epoch}"
            raise StaleMasterError(
                f"pilot {pilot_id} (epoch {epoch}) is not the master of {site} ({current})"
            )
        run(conn, _MASTER_SEEN, {"site_": site, "now_": now})
        run(conn, _VOUCHED, {"site_": site, "now_": now})
        master = run(conn, _MEMBER, {"pilot": pilot_id}).one_or_none()
        return master is None or master.credential_id is None

    def vouch(self, tx: Tx, site: str, pilot_id: int, epoch: int) -> bool:
        """The master's check (``_check_master``); True: it holds the shared pilot token."""
        require_distributed(self.sites, site)
        return self._check_master(tx.conn, site, pilot_id, epoch, self.core.clock())

    def _keys(
        self, conn: Connection, site: str, epoch: int, pilot_ids: Sequence[int], shared: bool
    ) -> tuple[tuple[PilotKey, ...], tuple[int, ...]]:
        """For the master of ``epoch`` (checked by the caller): the keys of the asked-about
        pilots that are live pilots of the site, and the others (not named: live pilots with a
        credential of their own, when the master holds the shared token; no key for them)."""
        if not pilot_ids:
            return (), ()
        state = site_row(conn, site)
        live = self._site_pilots(conn, site, pilot_ids)
        ours = _ours(live, shared)
        keys = tuple(PilotKey(p, epoch_key_hex(state, site, p, epoch)) for p in ours)
        return keys, tuple(sorted(set(pilot_ids) - live.keys()))

    def _site_pilots(
        self, conn: Connection, site: str, pilot_ids: Iterable[int]
    ) -> dict[int, int | None]:
        """The live pilots of ``site`` among ``pilot_ids``, in id order, each with the
        credential it registered with (None: the shared pilot token)."""
        wanted = sorted(set(pilot_ids))
        if len(wanted) > _BY_ONE:  # the roster, once a heartbeat: one statement
            query = sa.select(t.pilots.c.id, t.pilots.c.credential_id).where(
                t.pilots.c.id.in_(wanted), t.pilots.c.site == site, t.pilots.c.state.in_(ACTIVE)
            )
            return dict(sorted(tuple(row) for row in conn.execute(query)))
        found: dict[int, int | None] = {}
        for pilot_id in wanted:  # a round's few, each by its primary key
            row = run(conn, _MEMBER, {"pilot": pilot_id}).one_or_none()
            if row is not None and row.site == site and row.state in ACTIVE:
                found[pilot_id] = row.credential_id
        return found

    def _release(self, tx: Tx, site: str, task_ids: Sequence[int], shared: bool) -> None:
        """Tasks the master could not deliver (or a worker lost): back to the queue (``shared``:
        only those of the shared token's pilots)."""
        if not task_ids:
            return
        now = self.core.clock()
        requeued: list[QueuedTask] = []
        conn = tx.conn
        for task_id in sorted(set(task_ids)):
            task = conn.execute(
                sa.select(t.tasks).where(t.tasks.c.id == task_id).with_for_update()
            ).one_or_none()
            if task is None or task.state != TaskState.RUNNING.value:
                continue
            pilot = pilot_row(conn, task.pilot_id)
            if pilot is None or pilot.site != site or (shared and pilot.credential_id is not None):
                continue
            conn.execute(
                t.tasks.update()
                .where(t.tasks.c.id == task_id)
                .values(state=TaskState.QUEUED.value, pilot_id=None, runnable_since=now)
            )
            conn.execute(
                t.pilots.update()
                .where(t.pilots.c.id == pilot.id, t.pilots.c.task_id == task_id)
                .values(state=PilotState.IDLE.value, task_id=None)
            )
            requeued.append(reread_queued(conn, task_id))

        def admit() -> None:
            for item in requeued:
                self.core.admit_task(item)

        tx.after_commit(admit)


def _ours(pilots: dict[int, int | None], shared: bool) -> list[int]:
    """Of ``_site_pilots``' answer, the pilots a master may act for: all of them, or (``shared``:
    it holds the shared pilot token) those registered with that token."""
    return [p for p, credential in pilots.items() if not shared or credential is None]
