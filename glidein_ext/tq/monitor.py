"""The PilotMonitor algorithm of seed 001 IV-A, pure: how many pilots to send to one site.

Seed IV-A, step by step (comments below number the seed's lines):
 1. recall the site's thresholds and its submitted pilots;
 2. available slots = maxPilots - submitted pilots;  3-4. none left: submit nothing;
 5. the task groups queued in the TQ that can run at this site;
 6-10. per group: inactive pilots cover its tasks first; the rest get new pilots while slots last;
 11-12. fewer idle pilots than minIdlePilots: send more;  13-14. fewer than minPilots: send more.
"Submitted" counts every pilot still alive at the site: inactive (waiting in the site's batch
system), idle and busy.  The answer never exceeds the available slots.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Thresholds:
    """Per-site policy (seed IV-A)."""

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
    """Seed IV-A: the number of new pilots to ask the PilotManager for, with the reason."""
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
    """Seed IV-A: the number of new pilots to ask the PilotManager for."""
    return plan(limits, site).count
