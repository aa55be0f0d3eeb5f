"""The distributed architecture's master calls at the Task Queue (Delgado Peris 2014 §III.B): the
claim of the role, ``sync`` and ``assign``.

The master of a distributed site calls the Task Queue for its whole site: ``sync`` carries the
workers' completions, the workers it found dead, the tasks it could not deliver, and how many of
the site's runnable tasks it wants (0: a heartbeat); ``assign`` carries a round's pairs, each task
taken atomically (``state = 'queued'``) and each pilot given one task at most.  Both carry the
epoch the Task Queue handed out with the role: a stale one is refused (StaleMasterError, HTTP
409), so two masters never both assign; an accepted call vouches for the site's pilots (their
``last_seen``: only the master heartbeats).  A claim is decided by ``sched.election.arbitrate``
and each grant comes with a new epoch; the old master (silent for the master timeout) and the
lower-id pilots the claimant could not reach are lost, their tasks requeued.  A site's runnable
tasks are the queued tasks none of whose inputs was produced at another site.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from glidein_ext.errors import StaleMasterError, TaskQueueNotFound, TaskQueueRequestError
from glidein_ext.sched.election import arbitrate
from glidein_ext.tq.client.protocol import (
    Claim,
    ClaimAnswer,
    CompletionAnswer,
    MasterInfo,
    Placed,
    SiteAssign,
    SiteAssignAnswer,
    SitePilot,
    SiteSync,
    SiteSyncAnswer,
    TaskOffer,
)
from glidein_ext.tq.models import Architecture, PilotState, QueuedTask, TaskState
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.store.core import ACTIVE, reread_queued, spec_of
from glidein_ext.tq.service.store.sites import SiteCoordination, pilot_row, set_master, site_row


class MasterCalls(SiteCoordination):
    """The calls of a distributed site's master; each public method is one or a few
    transactions."""

    def claim_master(self, site: str, claim: Claim) -> ClaimAnswer:
        """A pilot asks for its site's master role; granted by ``sched.election.arbitrate``."""
        self._distributed(site)
        now = self.clock()
        with self._lock, self._tx() as conn:
            state = site_row(conn, site)
            live = dict(
                conn.execute(
                    sa.select(t.pilots.c.id, t.pilots.c.dht_address).where(
                        t.pilots.c.site == site, t.pilots.c.state.in_(ACTIVE)
                    )
                ).all()
            )
            seen = state.master_seen
            alive = (
                state.master_id in live and seen is not None and now - seen <= self.master_timeout
            )
            verdict = arbitrate(claim.pilot_id, state.master_id, alive, live, claim.unreachable)
            if not verdict.granted:
                current = None
                if alive and state.master_id is not None:
                    address = live[state.master_id] or ""
                    current = MasterInfo(state.master_id, address, state.epoch)
                return ClaimAnswer(False, verdict.reason, current, (), round(self.master_timeout))
            gone = {p for p in claim.unreachable if p in live and p < claim.pilot_id}
            old = state.master_id
            if old is not None and old != claim.pilot_id and old in live:
                gone.add(old)  # silent for the master timeout: lost, its task requeued
            epoch = state.epoch + 1
            set_master(conn, site, claim.pilot_id, epoch, now)
        self.counters.on_master(site, claim.pilot_id, epoch, now)
        if gone:
            self._retire(sorted(gone), PilotState.LOST)  # their tasks go back to the queue
        with self._tx() as conn:
            rows = conn.execute(
                sa.select(t.pilots.c.id, t.pilots.c.dht_address, t.pilots.c.task_id).where(
                    t.pilots.c.site == site, t.pilots.c.state.in_(ACTIVE)
                )
            ).all()
            attempts = _attempts(conn, [r.task_id for r in rows if r.task_id is not None])
        pilots = tuple(
            SitePilot(r.id, r.dht_address or "", r.task_id, attempts.get(r.task_id))
            for r in rows
            if r.id != claim.pilot_id
        )
        address = live.get(claim.pilot_id) or ""
        return ClaimAnswer(
            True,
            verdict.reason,
            MasterInfo(claim.pilot_id, address, epoch),
            pilots,
            round(self.master_timeout),
        )

    def sync(self, site: str, call: SiteSync) -> SiteSyncAnswer:
        """The master's bulk call: completions, dead workers, undelivered tasks, and (``want``)
        the site's runnable tasks.  Also its heartbeat, for itself and its workers."""
        self._vouch(site, call.pilot_id, call.epoch)
        dead = self._site_pilots(site, call.dead)
        if dead:
            self._retire(dead, PilotState.LOST)
        results = []
        members = set(self._site_pilots(site, [item.pilot_id for item in call.completions]))
        for item in call.completions:
            if item.pilot_id not in members:  # a master reports for its own site's pilots only
                answer = f"unknown: pilot {item.pilot_id} is no live pilot of {site}"
                results.append(CompletionAnswer(False, False, answer[:100]))
                continue
            try:
                results.append(self.complete(item.pilot_id, item.completion))
            except TaskQueueNotFound as exc:
                results.append(CompletionAnswer(False, False, f"unknown: {exc}"[:100]))
        self._release(site, call.release)
        offers, queued = self._runnable(site, call.want)
        return SiteSyncAnswer(tuple(offers), tuple(results), queued)

    def assign(self, site: str, call: SiteAssign) -> SiteAssignAnswer:
        """The round's pairs; each task taken atomically, each pilot given one task at most."""
        now = self.clock()
        accepted: list[Placed] = []
        with self._lock, self._tx() as conn:
            self._check_master(conn, site, call.pilot_id, call.epoch, now)
            given: set[int] = set()
            for pair in call.pairs:
                if pair.pilot_id in given:
                    continue
                pilot = conn.execute(
                    sa.select(t.pilots).where(t.pilots.c.id == pair.pilot_id).with_for_update()
                ).one_or_none()
                if (
                    pilot is None
                    or pilot.site != site
                    or pilot.state not in ACTIVE
                    or pilot.task_id is not None
                ):
                    continue
                taken = conn.execute(
                    t.tasks.update()
                    .where(t.tasks.c.id == pair.task_id, t.tasks.c.state == TaskState.QUEUED.value)
                    .values(
                        state=TaskState.RUNNING.value,
                        attempt=t.tasks.c.attempt + 1,
                        pilot_id=pair.pilot_id,
                    )
                )
                if taken.rowcount != 1:
                    continue
                conn.execute(
                    t.pilots.update()
                    .where(t.pilots.c.id == pair.pilot_id)
                    .values(state=PilotState.BUSY.value, task_id=pair.task_id, last_seen=now)
                )
                attempt = conn.execute(
                    sa.select(t.tasks.c.attempt).where(t.tasks.c.id == pair.task_id)
                ).scalar_one()
                given.add(pair.pilot_id)
                accepted.append(Placed(pair.task_id, pair.pilot_id, attempt))
        with self._lock:  # the matcher: the pool's listener updates it too (tq.service.notify)
            for placed in accepted:
                self.matcher.remove_task(placed.task_id)
                self.matcher.set_idle(placed.pilot_id, False)
        report = call.round
        compared = (report.compared_sum, report.compared_served)
        self.counters.on_round(report.rank_sum, report.served, compared)
        return SiteAssignAnswer(tuple(accepted))

    # --- helpers -----------------------------------------------------------------------------

    def _distributed(self, site: str) -> None:
        if self.architecture_of(site) is not Architecture.DISTRIBUTED:
            raise TaskQueueRequestError(f"site {site!r} does not use the distributed architecture")

    def _check_master(
        self, conn: Connection, site: str, pilot_id: int, epoch: int, now: float
    ) -> None:
        """The call comes from the site's master of this epoch, or StaleMasterError; it vouches
        for the master and its site's pilots (only the master heartbeats)."""
        state = conn.execute(
            sa.select(t.site_state).where(t.site_state.c.site == site).with_for_update()
        ).one_or_none()
        if state is None or state.master_id != pilot_id or state.epoch != epoch:
            current = "none" if state is None else f"pilot {state.master_id}, epoch {state.epoch}"
            raise StaleMasterError(
                f"pilot {pilot_id} (epoch {epoch}) is not the master of {site} ({current})"
            )
        conn.execute(
            t.site_state.update().where(t.site_state.c.site == site).values(master_seen=now)
        )
        conn.execute(
            t.pilots.update()
            .where(t.pilots.c.site == site, t.pilots.c.state.in_(ACTIVE))
            .values(last_seen=now)
        )

    def _vouch(self, site: str, pilot_id: int, epoch: int) -> None:
        self._distributed(site)
        with self._lock, self._tx() as conn:
            self._check_master(conn, site, pilot_id, epoch, self.clock())

    def _site_pilots(self, site: str, pilot_ids: Iterable[int]) -> list[int]:
        wanted = sorted(set(pilot_ids))
        if not wanted:
            return []
        with self._tx() as conn:
            return list(
                conn.execute(
                    sa.select(t.pilots.c.id).where(
                        t.pilots.c.id.in_(wanted),
                        t.pilots.c.site == site,
                        t.pilots.c.state.in_(ACTIVE),
                    )
                ).scalars()
            )

    def _release(self, site: str, task_ids: Sequence[int]) -> None:
        """Tasks the master could not deliver (or a worker lost): back to the queue."""
        if not task_ids:
            return
        now = self.clock()
        requeued: list[QueuedTask] = []
        with self._lock, self._tx() as conn:
            for task_id in sorted(set(task_ids)):
                task = conn.execute(
                    sa.select(t.tasks).where(t.tasks.c.id == task_id).with_for_update()
                ).one_or_none()
                if task is None or task.state != TaskState.RUNNING.value:
                    continue
                pilot = pilot_row(conn, task.pilot_id)
                if pilot is None or pilot.site != site:
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
        with self._lock:
            for item in requeued:
                self.admit_task(item)

    def _runnable(self, site: str, want: int) -> tuple[list[TaskOffer], int]:
        """The site's runnable tasks (Delgado Peris 2014 §III.B: selected by site only): queued,
        none of their
        inputs produced at another site; by priority, then age.  At most ``want``; and how many
        there are in all."""
        foreign = (
            sa.select(t.task_inputs.c.task_id)
            .join(t.files, t.files.c.lfn == t.task_inputs.c.lfn)
            .where(
                t.task_inputs.c.task_id == t.tasks.c.id,
                t.files.c.site.is_not(None),
                t.files.c.site != site,
            )
            .exists()
        )
        runnable = sa.and_(t.tasks.c.state == TaskState.QUEUED.value, ~foreign)
        with self._tx() as conn:
            total = conn.execute(sa.select(sa.func.count()).where(runnable)).scalar_one()
            if want <= 0:
                return [], total
            rows = conn.execute(
                sa.select(t.tasks)
                .where(runnable)
                .order_by(t.tasks.c.priority.desc(), t.tasks.c.id)
                .limit(want)
            ).all()
        return [_offer(row) for row in rows], total


def _attempts(conn: Connection, task_ids: Sequence[int]) -> dict[int, int]:
    if not task_ids:
        return {}
    return dict(
        conn.execute(
            sa.select(t.tasks.c.id, t.tasks.c.attempt).where(t.tasks.c.id.in_(task_ids))
        ).all()
    )


def _offer(row: Any) -> TaskOffer:
    spec = spec_of(row)
    return TaskOffer(
        task_id=row.id,
        name=row.name,
        command=row.command,
        inputs=tuple(json.loads(row.inputs)),
        outputs=tuple(json.loads(row.outputs)),
        max_runtime=spec.max_runtime,
        requirements=spec.requirements,
        rank=spec.rank,
        request_cpus=spec.request_cpus,
        request_memory=spec.request_memory,
        request_disk=spec.request_disk,
        attributes=dict(spec.attributes),
        priority=row.priority,
    )
