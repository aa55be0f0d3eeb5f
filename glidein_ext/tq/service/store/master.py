"""The distributed architecture's master calls at the Task Queue (Delgado Peris 2014 §III.B): the
claim of the role, ``sync`` and ``assign``.

The master of a distributed site calls the Task Queue for its whole site: ``sync`` carries the
workers' completions, the workers it found dead, the tasks it could not deliver, and how many of
the site's runnable tasks it wants (0: a heartbeat); ``assign`` carries a round's pairs, each task
taken atomically (``state = 'queued'``) and each pilot given one task at most.  Both carry the
epoch the Task Queue handed out with the role: a stale one is refused (StaleMasterError, HTTP
409), so two masters never both assign; an accepted call vouches for the site's pilots (their
``last_seen``: only the master heartbeats).  A claim is decided by ``sched.election.arbitrate``
and each grant comes with a new epoch; the old master, which the Task Queue's own record shows
silent for the master timeout, is lost, its task requeued.  The lower-id pilots the claimant says
it could not reach only let it claim: nothing confirms that they are dead (one pilot's word), so
they stay as they are, in the new master's roster, which finds the dead ones by their missed rounds
and a probe (and reports them in ``sync``).  With the grant the new master gets each live pilot's
key for its epoch (``tq.client.pilotkeys``), and ``sync`` answers the keys of the pilots it asks
about (those it met since) and names those that are no live pilots of the site any more (revoked,
gone: the master tells them to leave).

What ``sync`` offers a site is decided by ``sched.offers.choose_offers`` (the simulator calls it
too): only tasks whose Requirements match one of the site's registered pilots; a task whose inputs
were made at several sites goes to the one holding most of them (the rest are read from the SE),
and to the others when it would wait while their matching pilots are idle; the tasks whose inputs
an idle pilot of the site made come first.  ``assign`` checks every pair both ways, as the
pre-DHT matcher does (``tq.service.matcher``): a refused pair says why in the answer
(``Refused``) and in the counters.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from glidein_ext.errors import StaleMasterError, TaskQueueNotFound, TaskQueueRequestError
from glidein_ext.sched.election import arbitrate
from glidein_ext.sched.offers import Made, Member, Runnable, choose_offers
from glidein_ext.tq.client.protocol import (
    Claim,
    ClaimAnswer,
    CompletionAnswer,
    MasterInfo,
    PilotKey,
    Placed,
    Refused,
    SiteAssign,
    SiteAssignAnswer,
    SitePilot,
    SiteSync,
    SiteSyncAnswer,
    TaskOffer,
)
from glidein_ext.tq.models import (
    Architecture,
    MatchSpec,
    PilotInfo,
    PilotState,
    QueuedTask,
    TaskState,
)
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.matcher import pilot_ad, task_ad
from glidein_ext.tq.service.store.core import (
    ACTIVE,
    CHUNK,
    StoreCore,
    Tx,
    pilot_info,
    reread_queued,
    spec_of,
)
from glidein_ext.tq.service.store.pilots import PilotProtocol
from glidein_ext.tq.service.store.sites import (
    SiteCoordination,
    epoch_key_hex,
    pilot_row,
    set_master,
    site_row,
)


class MasterCalls:
    """The calls of a distributed site's master, over the site DHT (``sites``) and the pilot
    protocol; each method works in the caller's transaction."""

    def __init__(self, core: StoreCore, sites: SiteCoordination, pilots: PilotProtocol) -> None:
        self.core = core
        self.sites = sites
        self.pilots = pilots
        # The queued tasks as the offers see them, kept between syncs (a task's spec and inputs
        # never change): a sync reads only the new ones' in full.
        self._queued: dict[int, Runnable] = {}

    def claim_master(self, tx: Tx, site: str, claim: Claim) -> ClaimAnswer:
        """A pilot asks for its site's master role; granted by ``sched.election.arbitrate``."""
        self._distributed(site)
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
        rows = conn.execute(
            sa.select(t.pilots.c.id, t.pilots.c.dht_address, t.pilots.c.task_id).where(
                t.pilots.c.site == site, t.pilots.c.state.in_(ACTIVE)
            )
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
            if r.id != claim.pilot_id
        )
        address = live.get(claim.pilot_id) or ""
        return ClaimAnswer(
            True,
            verdict.reason,
            MasterInfo(claim.pilot_id, address, epoch),
            pilots,
            round(timeout),
        )

    def sync(self, tx: Tx, site: str, call: SiteSync) -> SiteSyncAnswer:
        """The master's bulk call: completions, dead workers, undelivered tasks, and (``want``)
        the site's runnable tasks.  Also its heartbeat, for itself and its workers."""
        self._vouch(tx, site, call.pilot_id, call.epoch)
        if call.phases:  # the master's round phases, for the counters
            tx.after_commit(functools.partial(self.sites.counters.on_phases, site, call.phases))
        dead = self._site_pilots(tx.conn, site, call.dead)
        if dead:
            self.pilots.retire(tx, dead, PilotState.LOST)
        results = []
        completed = [item.pilot_id for item in call.completions]
        members = set(self._site_pilots(tx.conn, site, completed))
        for item in call.completions:
            if item.pilot_id not in members:  # a master reports for its own site's pilots only
                answer = f"unknown: pilot {item.pilot_id} is no live pilot of {site}"
                results.append(CompletionAnswer(False, False, answer[:100]))
                continue
            try:
                results.append(self.sites.complete(tx, item.pilot_id, item.completion))
            except TaskQueueNotFound as exc:
                results.append(CompletionAnswer(False, False, f"unknown: {exc}"[:100]))
        self._release(tx, site, call.release)
        keys, gone = self._keys(tx.conn, site, call.epoch, call.pilots)
        offers, queued = self._runnable(tx.conn, site, call.want)
        return SiteSyncAnswer(tuple(offers), tuple(results), queued, keys, gone)

    def assign(self, tx: Tx, site: str, call: SiteAssign) -> SiteAssignAnswer:
        """The round's pairs; each task taken atomically, each pilot given one task at most, each
        pair checked both ways (Requirements, resources, life) as the pre-DHT matcher checks it;
        a refused pair is answered with its reason."""
        now = self.core.clock()
        accepted: list[Placed] = []
        refused: list[tuple[Refused, str]] = []  # (the pair, its counter)
        conn = tx.conn
        self._check_master(conn, site, call.pilot_id, call.epoch, now)
        given: set[int] = set()
        for pair in call.pairs:

            def refuse(kind: str, reason: str, pair: Any = pair) -> None:
                refused.append((Refused(pair.task_id, pair.pilot_id, reason[:200]), kind))

            if pair.pilot_id in given:
                refuse("pilot", f"pilot {pair.pilot_id} was given a task already in this call")
                continue
            pilot = conn.execute(
                sa.select(t.pilots).where(t.pilots.c.id == pair.pilot_id).with_for_update()
            ).one_or_none()
            if pilot is None or pilot.site != site or pilot.state not in ACTIVE:
                refuse("pilot", f"pilot {pair.pilot_id} is no live pilot of {site}")
                continue
            if pilot.task_id is not None:
                refuse("pilot", f"pilot {pair.pilot_id} runs task {pilot.task_id}")
                continue
            task = conn.execute(
                sa.select(t.tasks.c.state, t.tasks.c.spec).where(t.tasks.c.id == pair.task_id)
            ).one_or_none()
            if task is None or task.state != TaskState.QUEUED.value:
                state = "unknown" if task is None else task.state
                refuse("task", f"task {pair.task_id} is {state}, not queued")
                continue
            why = mismatch(spec_of(task), pilot_info(pilot), now)
            if why is not None:
                refuse("match", f"task {pair.task_id} and pilot {pair.pilot_id}: {why}")
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
                refuse("task", f"task {pair.task_id} is no longer queued")
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
        return SiteAssignAnswer(tuple(accepted), tuple(item for item, _ in refused))

    # --- helpers -----------------------------------------------------------------------------

    def _distributed(self, site: str) -> None:
        if self.sites.architecture_of(site) is not Architecture.DISTRIBUTED:
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

    def _vouch(self, tx: Tx, site: str, pilot_id: int, epoch: int) -> None:
        self._distributed(site)
        self._check_master(tx.conn, site, pilot_id, epoch, self.core.clock())

    def _keys(
        self, conn: Connection, site: str, epoch: int, pilot_ids: Sequence[int]
    ) -> tuple[tuple[PilotKey, ...], tuple[int, ...]]:
        """For the master of ``epoch`` (checked by the caller): the keys of the asked-about
        pilots that are live pilots of the site, and the others."""
        if not pilot_ids:
            return (), ()
        state = site_row(conn, site)
        live = set(self._site_pilots(conn, site, pilot_ids))
        keys = tuple(PilotKey(p, epoch_key_hex(state, site, p, epoch)) for p in sorted(live))
        return keys, tuple(sorted(set(pilot_ids) - live))

    def _site_pilots(self, conn: Connection, site: str, pilot_ids: Iterable[int]) -> list[int]:
        wanted = sorted(set(pilot_ids))
        if not wanted:
            return []
        return list(
            conn.execute(
                sa.select(t.pilots.c.id).where(
                    t.pilots.c.id.in_(wanted),
                    t.pilots.c.site == site,
                    t.pilots.c.state.in_(ACTIVE),
                )
            ).scalars()
        )

    def _release(self, tx: Tx, site: str, task_ids: Sequence[int]) -> None:
        """Tasks the master could not deliver (or a worker lost): back to the queue."""
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

        def admit() -> None:
            for item in requeued:
                self.core.admit_task(item)

        tx.after_commit(admit)

    def _runnable(self, conn: Connection, site: str, want: int) -> tuple[list[TaskOffer], int]:
        """What to offer the site (``sched.offers.choose_offers``, module docstring): at most
        ``want`` tasks, best first; and how many the site may run now."""
        queued_state = TaskState.QUEUED.value
        queued = self._read_queued(conn)
        producer = t.tasks.alias("producer")
        reader = t.tasks.alias("reader")
        made = {
            r.lfn: Made(r.site, r.pilot_id)
            for r in conn.execute(
                sa.select(t.files.c.lfn, t.files.c.site, producer.c.pilot_id)
                .select_from(
                    t.task_inputs.join(reader, reader.c.id == t.task_inputs.c.task_id)
                    .join(t.files, t.files.c.lfn == t.task_inputs.c.lfn)
                    .outerjoin(producer, producer.c.id == t.files.c.produced_by)
                )
                .where(reader.c.state == queued_state, t.files.c.site.is_not(None))
                .distinct()
            )
        }
        pilots = conn.execute(
            sa.select(t.pilots.c.id, t.pilots.c.site, t.pilots.c.state).where(
                t.pilots.c.state.in_(ACTIVE)
            )
        ).all()
        distributed = {
            name: self.sites.architecture_of(name) is Architecture.DISTRIBUTED
            for name in {p.site for p in pilots}
        }
        idle = PilotState.IDLE.value
        members = [Member(p.id, p.site, p.state == idle) for p in pilots if distributed[p.site]]
        now = self.core.clock()
        hold = self.core.matcher.wait_for_data
        fits = _Fits(conn, now)
        chosen = choose_offers(site, want, queued, made, members, fits, now, hold)
        if not chosen.task_ids:
            return [], chosen.runnable
        found = {
            row.id: row
            for row in conn.execute(sa.select(t.tasks).where(t.tasks.c.id.in_(chosen.task_ids)))
        }
        return [_offer(found[i]) for i in chosen.task_ids if i in found], chosen.runnable

    def _read_queued(self, conn: Connection) -> list[Runnable]:
        """The queued tasks by priority, then age; the spec and inputs of those not known yet
        read in chunks."""
        rows = conn.execute(
            sa.select(t.tasks.c.id, t.tasks.c.priority, t.tasks.c.runnable_since)
            .where(t.tasks.c.state == TaskState.QUEUED.value)
            .order_by(t.tasks.c.priority.desc(), t.tasks.c.id)
        ).all()
        known = self._queued
        new = [r.id for r in rows if r.id not in known]
        for start in range(0, len(new), CHUNK):
            for r in conn.execute(
                sa.select(t.tasks.c.id, t.tasks.c.spec, t.tasks.c.inputs).where(
                    t.tasks.c.id.in_(new[start : start + CHUNK])
                )
            ):
                known[r.id] = Runnable(r.id, r.spec, tuple(json.loads(r.inputs)))
        queued = []
        for r in rows:
            task = known[r.id]
            since = r.runnable_since or 0.0
            if task.priority != r.priority or task.since != since:
                task = dataclasses.replace(task, priority=r.priority, since=since)
            queued.append(task)
        self._queued = {task.task_id: task for task in queued}
        return queued


class _Fits:
    """``matches(pilot_id, spec_json)`` for ``choose_offers``: the pair checked both ways, ads
    built once per call."""

    def __init__(self, conn: Connection, now: float) -> None:
        self._conn = conn
        self._now = now
        self._pilots: dict[int, tuple[PilotInfo, Any]] = {}
        self._tasks: dict[str, tuple[MatchSpec, Any]] = {}

    def __call__(self, pilot_id: int, group: Any) -> bool:
        pilot = self._pilots.get(pilot_id)
        if pilot is None:
            row = self._conn.execute(sa.select(t.pilots).where(t.pilots.c.id == pilot_id)).one()
            info = pilot_info(row)
            pilot = self._pilots[pilot_id] = (info, pilot_ad(info))
        task = self._tasks.get(group)
        if task is None:
            spec = _spec_from_json(group)
            task = self._tasks[group] = (spec, task_ad(spec))
        return mismatch(task[0], pilot[0], self._now, task[1], pilot[1]) is None


def _spec_from_json(text: str) -> MatchSpec:
    raw = json.loads(text)
    raw["attributes"] = tuple(tuple(item) for item in raw["attributes"])
    return MatchSpec(**raw)


def mismatch(
    spec: MatchSpec, pilot: PilotInfo, now: float, task_ad_: Any = None, pilot_ad_: Any = None
) -> str | None:
    """Why this task may not run on this pilot (one short line), or None: its resources and life
    (``MaxRunTime`` within the pilot's remaining life), then HTCondor's match both ways (the
    pre-DHT matcher's check, ``tq.service.matcher``)."""
    if spec.request_cpus > pilot.cpus:
        return f"the task asks for {spec.request_cpus} CPUs, the pilot has {pilot.cpus}"
    if spec.request_memory > pilot.memory:
        return f"the task asks for {spec.request_memory} MB of memory, the pilot has {pilot.memory}"
    if spec.request_disk > pilot.disk:
        return f"the task asks for {spec.request_disk} MB of disk, the pilot has {pilot.disk}"
    remaining = pilot.remaining(now)
    if spec.max_runtime > remaining:
        return f"the task's MaxRunTime {spec.max_runtime} s outlives the pilot ({remaining:.0f} s)"
    task = task_ad(spec) if task_ad_ is None else task_ad_
    worker = pilot_ad(pilot) if pilot_ad_ is None else pilot_ad_
    if not worker.matches(task):  # the task's Requirements, with the pilot as TARGET
        return f"the task's Requirements are not met: {spec.requirements}"[:200]
    if not task.matches(worker):  # the pilot's Requirements, with the task as TARGET
        return f"the pilot's Requirements are not met: {pilot.requirements}"[:200]
    return None


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
