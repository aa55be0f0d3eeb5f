"""What a distributed site's master is offered in ``sync`` (Delgado Peris 2014 §III.C), and the
check of a (task, pilot) pair both ways that ``assign`` makes too.

What ``sync`` offers a site is decided by ``sched.offers.choose_offers`` (the simulator calls it
too): only tasks whose Requirements match one of the site's registered pilots; a task whose inputs
were made at several sites goes to the one holding most of them (the rest are read from the SE),
and to the others when it would wait while their matching pilots are idle; the tasks whose inputs
an idle pilot of the site made come first.  A pair is checked as the pre-DHT matcher checks it
(``tq.service.matching.matcher``): resources, life, then HTCondor's match both ways (``mismatch``).

A sync reads the queue once per call; the queued tasks of priority 0 none of whose inputs was
made (no site holds any), of one spec, are offered by their id alone (``sched.offers.Unheld``):
the database counts them and hands out the ``want`` oldest of the site's share and the newest of
the others' (``_UnheldRows``), while the other queued tasks are read row by row: a queue of a
million independent tasks costs a sync a count on the state's index, one scan in the database
and two short ordered reads, not a Python object per queued task.

A pair of which either side calls a costly function (regexp and its kin, eval:
``tq.client.limits.costly_calls``) is never evaluated here, under the store's lock: with the
service's matcher deferring them (``Matcher.defer_costly``), its verdict is the one the costly
expressions' worker found (``tq.service.matching.costly``, within the pilot's budgets; the API
settles the site's pilots' pairs before the master's call reaches the store), and a pair without
one does not match for now, as in the pre-DHT matcher.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from glidein_ext.sched.offers import SHARE_BLOCK, Made, Member, Runnable, by_site, choose_offers
from glidein_ext.tq.client.protocol import TaskOffer
from glidein_ext.tq.models import Architecture, MatchSpec, PilotInfo, PilotState, TaskState
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.matching.match_groups import costly, pilot_ad, task_ad
from glidein_ext.tq.service.matching.matcher import Matcher
from glidein_ext.tq.service.store.core import ACTIVE, CHUNK, StoreCore, pilot_info, spec_of
from glidein_ext.tq.service.store.direct import run
from glidein_ext.tq.service.store.sites import SiteCoordination
from glidein_ext.tq.service.store.statements import constant_in, row_by_id

# A sync's statements, built once (``statements``): where each input of a queued task was made
# (its site, and the pilot that made it), the live pilots, and the queued tasks in order.
_PRODUCER = t.tasks.alias("producer")
_READER = t.tasks.alias("reader")
_MADE = (
    sa.select(t.files.c.lfn, t.files.c.site, _PRODUCER.c.pilot_id)
    .select_from(
        t.task_inputs.join(_READER, _READER.c.id == t.task_inputs.c.task_id)
        .join(t.files, t.files.c.lfn == t.task_inputs.c.lfn)
        .outerjoin(_PRODUCER, _PRODUCER.c.id == t.files.c.produced_by)
    )
    .where(_READER.c.state == TaskState.QUEUED.value, t.files.c.site.is_not(None))
    .distinct()
)
_LIVE_PILOTS = sa.select(t.pilots.c.id, t.pilots.c.site, t.pilots.c.state).where(
    constant_in(t.pilots.c.state, ACTIVE)
)
_QUEUED = (
    sa.select(t.tasks.c.id, t.tasks.c.priority, t.tasks.c.runnable_since)
    .where(t.tasks.c.state == TaskState.QUEUED.value)
    .order_by(t.tasks.c.priority.desc(), t.tasks.c.id)
)
# The queued tasks none of whose inputs was made (``sched.offers.Unheld``), of priority 0: a
# sync counts those of one spec (the oldest such task's) in the database and reads ``keep`` of
# them by share, not each row (module docstring).
_MADE_INPUT = (
    sa.select(t.task_inputs.c.task_id)
    .select_from(t.task_inputs.join(t.files, t.files.c.lfn == t.task_inputs.c.lfn))
    .where(t.task_inputs.c.task_id == t.tasks.c.id, t.files.c.site.is_not(None))
    .correlate(t.tasks)
    .exists()
)
_UNHELD = sa.and_(
    t.tasks.c.state == TaskState.QUEUED.value, t.tasks.c.priority == 0, sa.not_(_MADE_INPUT)
)
_OF_GROUP = t.tasks.c.spec == sa.bindparam("group_")
_IN_SHARE = t.tasks.c.id // SHARE_BLOCK % sa.bindparam("shares_") == sa.bindparam("share_")
_FIRST_UNHELD = sa.select(t.tasks.c.spec).where(_UNHELD).order_by(t.tasks.c.id).limit(1)
# all the queued tasks, counted on the state's index alone (the unheld are those the row-by-row
# read leaves out)
_QUEUED_COUNT = (
    sa.select(sa.func.count()).select_from(t.tasks).where(t.tasks.c.state == TaskState.QUEUED.value)
)
_UNHELD_OWN = (
    sa.select(t.tasks.c.id)
    .where(_UNHELD, _OF_GROUP, _IN_SHARE)
    .order_by(t.tasks.c.id)
    .limit(sa.bindparam("keep_"))
)
_UNHELD_OTHERS = (
    sa.select(t.tasks.c.id)
    .where(_UNHELD, _OF_GROUP, sa.not_(_IN_SHARE))
    .order_by(t.tasks.c.id.desc())
    .limit(sa.bindparam("keep_"))
)
_QUEUED_BUT_UNHELD = _QUEUED.where(sa.not_(sa.and_(_UNHELD, _OF_GROUP)))


class _UnheldRows:
    """``sched.offers.Unheld`` over the database: the queued, priority-0 tasks of one spec none
    of whose inputs was made, in the caller's transaction."""

    def __init__(self, conn: Connection, group: str, count: int) -> None:
        self.conn = conn
        self.group = group
        self._count = count

    def __len__(self) -> int:
        return self._count

    def own(self, share: int, shares: int, keep: int) -> list[int]:
        return self._ids(_UNHELD_OWN, share, shares, keep)

    def others(self, share: int, shares: int, keep: int) -> list[int]:
        if shares <= 1:
            return []  # one site may run them: every one is its share
        return self._ids(_UNHELD_OTHERS, share, shares, keep)[::-1]  # oldest first

    def _ids(self, query: Any, share: int, shares: int, keep: int) -> list[int]:
        values = {"group_": self.group, "share_": share, "shares_": shares, "keep_": keep}
        return [row[0] for row in run(self.conn, query, values, plain=True).all()]


class SiteOffers:
    """The runnable tasks offered to a site's master, read in the caller's transaction."""

    def __init__(self, core: StoreCore, sites: SiteCoordination, index_unheld: bool = True) -> None:
        self.core = core
        self.sites = sites
        self.index_unheld = index_unheld  # False: every queued task read (tests compare)
        # The queued tasks as the offers see them, kept between syncs (a task's spec and inputs
        # never change): a sync reads only the new ones' in full.
        self._queued: dict[int, Runnable] = {}

    def runnable(self, conn: Connection, site: str, want: int) -> tuple[list[TaskOffer], int]:
        """What to offer the site (``sched.offers.choose_offers``, module docstring): at most
        ``want`` tasks, best first; and how many the site may run now."""
        first = run(conn, _FIRST_UNHELD).first() if self.index_unheld else None
        group = None if first is None else first.spec
        queued = self._read_queued(conn, group)
        unheld = None
        if group is not None:
            count = run(conn, _QUEUED_COUNT).scalar_one() - len(queued)
            unheld = _UnheldRows(conn, group, count)
        made = {r.lfn: Made(r.site, r.pilot_id) for r in run(conn, _MADE)}
        pilots = run(conn, _LIVE_PILOTS).all()
        distributed = {
            name: self.sites.architecture_of(name) is Architecture.DISTRIBUTED
            for name in {p.site for p in pilots}
        }
        idle = PilotState.IDLE.value
        members = by_site(
            Member(p.id, p.site, p.state == idle) for p in pilots if distributed[p.site]
        )
        now = self.core.clock()
        hold = self.core.matcher.wait_for_data
        fits = _Fits(conn, now, self.core.matcher)
        chosen = choose_offers(site, want, queued, made, members, fits, now, hold, unheld)
        if not chosen.task_ids:
            return [], chosen.runnable
        found = {
            row.id: row
            for row in conn.execute(sa.select(t.tasks).where(t.tasks.c.id.in_(chosen.task_ids)))
        }
        offers = [offer_of(found[i]) for i in chosen.task_ids if i in found]
        shared = chosen.shared
        marked = [dataclasses.replace(o, shared=True) if o.task_id in shared else o for o in offers]
        return marked, chosen.runnable

    def _read_queued(self, conn: Connection, unheld: str | None) -> list[Runnable]:
        """The queued tasks by priority, then age, but the unheld ones of the spec ``unheld``
        (``_UnheldRows``); the spec and inputs of those not known yet read in chunks."""
        query, values = (
            (_QUEUED, {}) if unheld is None else (_QUEUED_BUT_UNHELD, {"group_": unheld})
        )
        rows = run(conn, query, values, plain=True).all()  # (id, priority, runnable_since)
        known = self._queued
        new = [r[0] for r in rows if r[0] not in known]
        for start in range(0, len(new), CHUNK):
            for r in conn.execute(
                sa.select(t.tasks.c.id, t.tasks.c.spec, t.tasks.c.inputs).where(
                    t.tasks.c.id.in_(new[start : start + CHUNK])
                )
            ):
                known[r.id] = Runnable(r.id, r.spec, tuple(json.loads(r.inputs)))
        queued = []
        for task_id, priority, runnable_since in rows:
            task = known[task_id]
            since = runnable_since or 0.0
            if task.priority != priority or task.since != since:
                task = dataclasses.replace(task, priority=priority, since=since)
            queued.append(task)
        self._queued = {task.task_id: task for task in queued}
        return queued


class _Fits:
    """``matches(pilot_id, spec_json)`` for ``choose_offers``: the pair checked both ways, ads
    built once per call; a costly pair as ``matcher`` settled it (module docstring)."""

    def __init__(self, conn: Connection, now: float, matcher: Matcher) -> None:
        self._conn = conn
        self._now = now
        self._matcher = matcher
        self._pilots: dict[int, tuple[PilotInfo, Any, bool]] = {}
        self._tasks: dict[str, tuple[MatchSpec, Any, bool]] = {}

    def __call__(self, pilot_id: int, group: Any) -> bool:
        pilot = self._pilots.get(pilot_id)
        if pilot is None:
            row = row_by_id(self._conn, t.pilots, pilot_id)
            info = pilot_info(row)
            pilot = (info, pilot_ad(info), costly(info.requirements, info.rank))
            self._pilots[pilot_id] = pilot
        task = self._tasks.get(group)
        if task is None:
            spec = _spec_from_json(group)
            task = self._tasks[group] = (spec, task_ad(spec), costly(spec.requirements, spec.rank))
        spec, info = task[0], pilot[0]
        if resources_mismatch(spec, info, self._now) is not None:
            return False
        if self._matcher.defer_costly and (task[2] or pilot[2]):
            return costly_mismatch(self._matcher, spec, info) is None
        return ads_mismatch(spec, info, task[1], pilot[1]) is None


def _spec_from_json(text: str) -> MatchSpec:
    raw = json.loads(text)
    raw["attributes"] = tuple(tuple(item) for item in raw["attributes"])
    return MatchSpec(**raw)


def mismatch(
    spec: MatchSpec,
    pilot: PilotInfo,
    now: float,
    task_ad_: Any = None,
    pilot_ad_: Any = None,
    matcher: Matcher | None = None,
) -> str | None:
    """Why this task may not run on this pilot (one short line), or None: its resources and life
    (``MaxRunTime`` within the pilot's remaining life), then HTCondor's match both ways (the
    pre-DHT matcher's check, ``tq.service.matching.matcher``); a costly pair as ``matcher``
    settled it when it defers them (module docstring)."""
    why = resources_mismatch(spec, pilot, now)
    if why is not None:
        return why
    if (
        matcher is not None
        and matcher.defer_costly
        and costly(spec.requirements, spec.rank, pilot.requirements, pilot.rank)
    ):
        return costly_mismatch(matcher, spec, pilot)
    if matcher is not None and task_ad_ is None and pilot_ad_ is None:
        verdict = matcher.known_verdict(pilot.pilot_id, spec.key())
        if verdict is not None and verdict.matched:
            return None  # the matcher's verdict, evaluated once per group and pilot
    return ads_mismatch(spec, pilot, task_ad_, pilot_ad_)  # (a refusal says which side)


def resources_mismatch(spec: MatchSpec, pilot: PilotInfo, now: float) -> str | None:
    """Why the task does not fit the pilot's resources or remaining life, or None."""
    if spec.request_cpus > pilot.cpus:
        return f"the task asks for {spec.request_cpus} CPUs, the pilot has {pilot.cpus}"
    if spec.request_memory > pilot.memory:
        return f"the task asks for {spec.request_memory} MB of memory, the pilot has {pilot.memory}"
    if spec.request_disk > pilot.disk:
        return f"the task asks for {spec.request_disk} MB of disk, the pilot has {pilot.disk}"
    remaining = pilot.remaining(now)
    if spec.max_runtime > remaining:
        return f"the task's MaxRunTime {spec.max_runtime} s outlives the pilot ({remaining:.0f} s)"
    return None


def costly_mismatch(matcher: Matcher, spec: MatchSpec, pilot: PilotInfo) -> str | None:
    """A costly pair's verdict as ``matcher`` holds it (never evaluated here): None if it
    matched, why not otherwise (no verdict yet: no match for now)."""
    verdict = matcher.settled(pilot.pilot_id, spec.key())
    if verdict is None:
        return "a costly expression (regexp and its kin) of the pair is not evaluated yet"
    if not verdict.matched:
        return "the Requirements are not met (costly expressions, evaluated apart)"
    return None


def ads_mismatch(
    spec: MatchSpec, pilot: PilotInfo, task_ad_: Any = None, pilot_ad_: Any = None
) -> str | None:
    """HTCondor's match both ways, evaluated here: why not, or None."""
    task = task_ad(spec) if task_ad_ is None else task_ad_
    worker = pilot_ad(pilot) if pilot_ad_ is None else pilot_ad_
    if not worker.matches(task):  # the task's Requirements, with the pilot as TARGET
        return f"the task's Requirements are not met: {spec.requirements}"[:200]
    if not task.matches(worker):  # the pilot's Requirements, with the task as TARGET
        return f"the pilot's Requirements are not met: {pilot.requirements}"[:200]
    return None


def offer_of(row: Any, spec: MatchSpec | None = None) -> TaskOffer:
    """A task row as the offer a TaskList carries (``spec``: its spec, if read already)."""
    spec = spec_of(row) if spec is None else spec
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
