"""The PilotMonitor of Hasham 2011 §IV-A, pure: how many pilots to send to one site, and the pass.

Hasham 2011 §IV-A (the PilotMonitor), step by step (comments below number the paper's lines):
 1. recall the site's thresholds and its submitted pilots;
 2. available slots = maxPilots - submitted pilots;  3-4. none left: submit nothing;
 5. the task groups queued in the TQ that can run at this site;
 6-10. per group: inactive pilots cover its tasks first; the rest get new pilots while slots last;
 11-12. fewer idle pilots than minIdlePilots: send more;  13-14. fewer than minPilots: send more.
"Submitted" counts every pilot still alive at the site: inactive (waiting in the site's batch
system), idle and busy.  The answer never exceeds the available slots.

A pass (``decide_site``, ``run_cycle``) applies ``plan`` to every site: it notices the pilots that
left the batch queue without registering, and submits what ``plan`` says.  It works against two
small interfaces, ``MonitorStore`` (the Task Queue's bookkeeping, ``tq.service.store``) and
``PilotSubmitter`` (the batch system, ``tq.manager.pilot_submit.PilotManager``), so unit tests
drive it with fakes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from glidein_ext.errors import CondorError
from glidein_ext.tq.manager.pilot_submit import PilotJob
from glidein_ext.tq.models import PilotInfo


@dataclass(frozen=True)
class Thresholds:
    """Per-site policy (Hasham 2011 §IV-A)."""

    min_pilots: int = 0
    max_pilots: int = 10
    min_idle_pilots: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.min_pilots <= self.max_pilots or self.min_idle_pilots < 0:
            raise ValueError("thresholds need 0 <= minPilots <= maxPilots and minIdlePilots >= 0")


@dataclass(frozen=True)
class SiteView:
    """What the PilotMonitor knows of a site now."""

    inactive: int = 0
    idle: int = 0
    busy: int = 0
    queued_groups: Sequence[int] = ()  # queued tasks per task group that can run here

    @property
    def submitted(self) -> int:
        return self.inactive + self.idle + self.busy


@dataclass(frozen=True)
class Plan:
    """The PilotMonitor's answer for one site and why (for the log and ``tq monitor``)."""

    count: int
    reason: str


def plan(limits: Thresholds, site: SiteView) -> Plan:
    """Hasham 2011 §IV-A: the number of new pilots to ask the PilotManager for, with the reason."""
    available = limits.max_pilots - site.submitted  # step 2
    if available <= 0:  # steps 3-4
        return Plan(0, f"no slot: {site.submitted} submitted >= maxPilots {limits.max_pilots}")
    send = 0
    uncovered_total = 0
    free_inactive = site.inactive
    for tasks in site.queued_groups:  # step 6
        if tasks <= free_inactive:  # steps 7-8: waiting pilots will take these tasks
            free_inactive -= tasks
            continue
        uncovered = tasks - free_inactive
        uncovered_total += uncovered
        free_inactive = 0
        send += min(uncovered, available - send)  # steps 9-10, within the slots left
    queued = sum(site.queued_groups)
    why = [
        f"{queued} queued task(s) in {len(site.queued_groups)} group(s), "
        f"{uncovered_total} not covered by inactive pilots"
    ]
    if site.idle + send < limits.min_idle_pilots:  # steps 11-12
        send = limits.min_idle_pilots - site.idle
        why.append(f"idle {site.idle} < minIdlePilots {limits.min_idle_pilots}")
    if site.submitted + send < limits.min_pilots:  # steps 13-14
        send = limits.min_pilots - site.submitted
        why.append(f"submitted {site.submitted} < minPilots {limits.min_pilots}")
    if max(send, uncovered_total) > available:
        why.append(f"capped at {available} free slot(s) of maxPilots {limits.max_pilots}")
    return Plan(max(0, min(send, available)), "; ".join(why))


def pilots_to_submit(limits: Thresholds, site: SiteView) -> int:
    """Hasham 2011 §IV-A: the number of new pilots to ask the PilotManager for."""
    return plan(limits, site).count


# --- the pass over the sites ---


class MonitorStore(Protocol):
    """What a PilotMonitor pass needs of the Task Queue's state (``tq.service.store.Store``)."""

    def submissions(self, site: str) -> Mapping[str, str]:
        """Batch id -> ``inactive`` (waiting in the batch queue), ``registered``, ``vanished``."""
        ...

    def mark_vanished(self, batch_ids: Iterable[str]) -> None: ...

    def site_view(self, site: str) -> SiteView:
        """The site's pilots inactive, idle and busy (``queued_groups`` not needed)."""
        ...

    def queued_groups_for(self, template: PilotInfo, now: float) -> list[int]: ...

    def record_submission(self, batch_id: str, site: str) -> None: ...


class PilotSubmitter(Protocol):
    """What a pass needs of the batch system (``tq.manager.pilot_submit.PilotManager``);
    CondorError if down."""

    def alive(self, batch_ids: Sequence[str]) -> set[str]:
        """The batch ids still idle or running in the batch queue."""
        ...

    def locate(self) -> None:
        """Raise CondorError unless the batch system can be reached."""
        ...

    def submit(self, site: str, count: int, job: PilotJob) -> list[str]:
        """Submit ``count`` pilots for ``site``; their batch ids."""
        ...


@dataclass(frozen=True)
class SitePolicy:
    """A site the PilotMonitor watches: its thresholds and how its pilots start."""

    site: str
    limits: Thresholds
    job: PilotJob
    template: PilotInfo = field(default_factory=lambda: PilotInfo(0))


@dataclass(frozen=True)
class Decision:
    """What one PilotMonitor pass decided for one site, and why (logged, shown by the CLI)."""

    site: str
    limits: Thresholds
    inactive: int = 0
    idle: int = 0
    busy: int = 0
    queued_groups: tuple[int, ...] = ()
    vanished: tuple[str, ...] = ()  # noticed in this pass: left the queue, never registered
    count: int = 0  # pilots to submit
    submitted: tuple[str, ...] = ()  # batch ids submitted in this pass
    reason: str = ""
    error: str | None = None  # the pass failed for this site (schedd down...); retried next time

    def describe(self) -> str:
        head = (
            f"site {self.site}: inactive={self.inactive} idle={self.idle} busy={self.busy} "
            f"queued={sum(self.queued_groups)} min/max/minIdle={self.limits.min_pilots}/"
            f"{self.limits.max_pilots}/{self.limits.min_idle_pilots}"
        )
        if self.vanished:
            head += f" vanished={','.join(self.vanished)}"
        if self.error is not None:
            return f"{head}: failed: {self.error}"
        ids = f" ({', '.join(self.submitted)})" if self.submitted else ""
        return f"{head}: submit {self.count}{ids}: {self.reason}"


def decide_site(
    store: MonitorStore,
    manager: PilotSubmitter,
    policy: SitePolicy,
    now: float,
    dry_run: bool = False,
) -> Decision:
    """One PilotMonitor pass for one site; CondorError becomes ``Decision.error``.

    A dry run reaches the batch system (``locate``) but records nothing and submits nothing; the
    pilots it finds vanished are left out of the inactive count, as a real pass would.
    """
    try:
        states = store.submissions(policy.site)
        waiting = [batch_id for batch_id, state in states.items() if state == "inactive"]
        gone = sorted(set(waiting) - manager.alive(waiting))
        if dry_run:
            manager.locate()
        else:
            store.mark_vanished(gone)  # submitted, left the queue, never registered
        view = store.site_view(policy.site)
        # A glidein's agent registers one pilot per lane (its CPUs): a batch job waiting in the
        # queue stands for that many pilots, and a pilot count is submitted as whole glideins.
        per_job = policy.job.pilots_per_job
        inactive = (view.inactive - (len(gone) if dry_run else 0)) * per_job
        expires = now + policy.job.ttl if policy.job.ttl else policy.template.expires_at
        template = dataclasses.replace(
            policy.template, site=policy.site, cached=set(), expires_at=expires
        )
        groups = tuple(store.queued_groups_for(template, now))
        answer = plan(
            policy.limits,
            SiteView(inactive=inactive, idle=view.idle, busy=view.busy, queued_groups=groups),
        )
        submitted: list[str] = []
        if not dry_run:
            jobs = -(-answer.count // per_job)  # ceil: whole glideins
            submitted = manager.submit(policy.site, jobs, policy.job)
            for batch_id in submitted:
                store.record_submission(batch_id, policy.site)
    except CondorError as exc:
        return Decision(policy.site, policy.limits, error=str(exc))
    return Decision(
        policy.site,
        policy.limits,
        inactive=inactive,
        idle=view.idle,
        busy=view.busy,
        queued_groups=groups,
        vanished=tuple(gone),
        count=answer.count,
        submitted=tuple(submitted),
        reason=answer.reason,
    )


def run_cycle(
    store: MonitorStore,
    policies: Sequence[tuple[SitePolicy, PilotSubmitter]],
    now: float,
    dry_run: bool = False,
) -> list[Decision]:
    """One PilotMonitor pass over every site (Hasham 2011 §IV-A); a failing site stops no other."""
    return [decide_site(store, manager, policy, now, dry_run) for policy, manager in policies]


def monitor_cycle(
    store: MonitorStore, manager: PilotSubmitter, policies: Sequence[SitePolicy], now: float
) -> dict[str, int]:
    """One pass over every site through one batch system; the pilots submitted per site.

    The first site that failed raises its CondorError (after every site was passed over).
    """
    submitted: dict[str, int] = {}
    for decision in run_cycle(store, [(p, manager) for p in policies], now):
        if decision.error is not None:
            raise CondorError(decision.error)
        submitted[decision.site] = decision.count
    return submitted
