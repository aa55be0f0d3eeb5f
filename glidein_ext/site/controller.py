"""`glidein-ext site controller`: the automated site (Sfiligoi 2013, "The fully automated solution":
instead of a hard kill, set VACATE_DESIRED = true and PAYLOAD_DEADLINE = now + 2h; if the pilot
is not gone in time, it will be hard killed).

Each cycle compares the configured demand with what is already draining, picks victims with the
victim policy, writes their `.site.ad`, and hard-kills (per site policy) every pilot still
running ``kill_margin`` seconds after its deadline.  The state is derived each cycle from the
pool (SITE_VACATE_DESIRED / SITE_PAYLOAD_DEADLINE, published by the site cron from `.site.ad`),
from the requests in the pilots' job ads (the path to pilots on other machines, which their
node's cron turns into `.site.ad` at its next run: site/requests.py) and from the `.site.ad` files
of local sandboxes, so a restarted controller neither asks twice nor forgets a deadline.
:func:`plan` and :func:`with_job_requests` are pure; :class:`Controller` does the I/O.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from glidein_ext.adfile import read_ad
from glidein_ext.errors import AdFileError, AdFileMissing, GlideinExtError
from glidein_ext.glidein.sitead import (
    PAYLOAD_DEADLINE,
    SITE_AD_FILE,
    SITE_AD_SCHEMA,
    VACATE_DESIRED,
)
from glidein_ext.site import pool
from glidein_ext.site.demand import Demand, belongs_to, cpus_needed
from glidein_ext.site.pilots import Pilot
from glidein_ext.site.pool import KillMethod
from glidein_ext.site.requests import SiteRequest
from glidein_ext.site.vacate import local_sandbox, vacate
from glidein_ext.site.victims import Policy, Selection, choose_victims
from glidein_ext.timefmt import format_duration, format_time

log = logging.getLogger("glidein_ext.site.controller")

DEFAULT_GRACE = 2 * 3600  # "PAYLOAD_DEADLINE = <now + 2h>"
DEFAULT_KILL_MARGIN = 60


@dataclass(frozen=True)
class ControllerConfig:
    demand: Demand
    policy: Policy = Policy.WASTE
    grace: int = DEFAULT_GRACE
    kill_margin: int = DEFAULT_KILL_MARGIN
    kill_method: KillMethod = KillMethod.VACATE
    kill_stale: bool = False
    interval: int = 60
    pool: str | None = None
    execute_dirs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Action:
    kind: str  # "vacate" or "hard-kill"
    pilot: Pilot
    reason: str
    deadline: int | None = None


def plan(
    pilots: Sequence[Pilot],
    userprio: Mapping[str, float],
    need: int,
    now: int,
    cfg: ControllerConfig,
) -> tuple[Selection, list[Action]]:
    """The actions of one cycle (pure)."""
    actions: list[Action] = []
    for p in pilots:
        if (
            p.site_deadline is not None
            and p.site_vacate
            and now >= p.site_deadline + cfg.kill_margin
        ):
            actions.append(
                Action(
                    "hard-kill",
                    p,
                    f"still running {format_duration(now - p.site_deadline)} after its deadline",
                )
            )
        elif p.stale and cfg.kill_stale:
            actions.append(Action("hard-kill", p, f"stale heartbeat ({_old(p.heartbeat_age)})"))
    # The owner's own pilots are never its victims.
    others = [p for p in pilots if not belongs_to(p.owner, cfg.demand.owner)]
    selection = choose_victims(others, userprio, need, cfg.policy, now)
    deadline = now + cfg.grace
    for choice in selection.victims:
        actions.append(Action("vacate", choice.pilot, choice.reason, deadline))
    return selection, actions


def with_job_requests(pilots: Iterable[Pilot], requests: Mapping[str, SiteRequest]) -> list[Pilot]:
    """Pilots marked with the vacate requests of their job ads (asked, maybe not yet obeyed)."""
    out: list[Pilot] = []
    for pilot in pilots:
        request = requests.get(pilot.global_job_id or "")
        if request is None or not request.vacate:
            out.append(pilot)
            continue
        deadline = request.deadline if request.deadline is not None else pilot.site_deadline
        out.append(replace(pilot, site_vacate=True, site_deadline=deadline))
    return out


def with_local_site_ads(pilots: Iterable[Pilot], execute_dirs: Sequence[str]) -> list[Pilot]:
    """Pilots updated from the .site.ad of local sandboxes (fresher than the cron's copy)."""
    out: list[Pilot] = []
    for pilot in pilots:
        p = pilot
        sandbox = local_sandbox(p, execute_dirs) if execute_dirs else None
        if sandbox is not None:
            try:
                values = read_ad(f"{sandbox}/{SITE_AD_FILE}", SITE_AD_SCHEMA)
            except AdFileMissing:
                values = {}
            except AdFileError as exc:
                log.warning("%s: %s", p.slot, exc)
                values = {}
            vacate_ = values.get(VACATE_DESIRED) is True
            deadline = values.get(PAYLOAD_DEADLINE)
            p = replace(
                p,
                site_vacate=vacate_ or p.site_vacate,
                site_deadline=deadline
                if isinstance(deadline, int) and not isinstance(deadline, bool)
                else p.site_deadline,
            )
        out.append(p)
    return out


@dataclass(eq=False)
class Controller:
    """One controller: query, plan, act; every decision logged."""

    cfg: ControllerConfig
    dry_run: bool = False
    clock: Callable[[], float] = time.time
    # vacates and hard-kills that failed, since it started
    failed_actions: int = field(init=False, default=0)

    def need(self, pilots: Sequence[Pilot], userprio: Mapping[str, float]) -> int:
        demand = self.cfg.demand
        if demand.cpus is not None:
            return demand.cpus
        slots = pool.query_slot_ads(self.cfg.pool, "true")
        # A partitionable slot's Cpus are its unclaimed rest; its dynamic slots hold the others.
        total = sum(int(ad.get("Cpus") or 0) for ad in slots)
        free = sum(int(ad.get("Cpus") or 0) for ad in slots if ad.get("State") == "Unclaimed")
        in_use: dict[str, int] = {}
        for ad in slots:
            owner = ad.get("AccountingGroup") or ad.get("RemoteUser")
            if isinstance(owner, str) and ad.get("State") == "Claimed":
                in_use[owner] = in_use.get(owner, 0) + int(ad.get("Cpus") or 0)
        idle = pool.idle_cpus_by_owner(self.cfg.pool)
        return cpus_needed(
            demand, total_cpus=total, free_cpus=free, in_use=in_use, idle=idle, userprio=userprio
        )

    def cycle(self) -> list[Action]:
        """One cycle; GlideinExtError when the pool could not be read.  An action that failed
        is logged, and counted in ``failed_actions``."""
        now = int(self.clock())
        pilots = with_job_requests(
            pool.query_pilots(self.cfg.pool), pool.query_job_requests(self.cfg.pool)
        )
        pilots = with_local_site_ads(pilots, self.cfg.execute_dirs)
        userprio = pool.user_priorities(self.cfg.pool)
        need = self.need(pilots, userprio)
        selection, actions = plan(pilots, userprio, need, now, self.cfg)
        log.info(
            "cycle: %d pilots, need %d CPUs for %s, %d draining, %d chosen%s",
            len(pilots),
            need,
            self.cfg.demand.owner,
            selection.cpus_draining,
            selection.cpus_chosen,
            " (dry run)" if self.dry_run else "",
        )
        for choice in selection.draining:
            log.info("counted %s: %s", choice.pilot.slot, choice.reason)
        for action in actions:
            self.act(action)
        return actions

    def act(self, action: Action) -> None:
        prefix = "would " if self.dry_run else ""
        if action.kind == "vacate":
            log.info(
                "%svacate %s (deadline %s): %s",
                prefix,
                action.pilot.slot,
                "none"
                if action.deadline is None
                else format_time(action.deadline, int(self.clock())),
                action.reason,
            )
            if not self.dry_run:
                try:
                    result = vacate(
                        action.pilot, action.deadline, self.cfg.execute_dirs, pool=self.cfg.pool
                    )
                    log.info("vacated %s via %s (%s)", action.pilot.slot, result.how, result.where)
                except GlideinExtError as exc:
                    self.failed_actions += 1
                    log.error("vacate %s failed: %s", action.pilot.slot, exc)
            return
        log.info(
            "%shard-kill %s by %s: %s",
            prefix,
            action.pilot.slot,
            self.cfg.kill_method.value,
            action.reason,
        )
        if not self.dry_run:
            try:
                pool.hard_kill(action.pilot, self.cfg.kill_method, self.cfg.pool)
            except GlideinExtError as exc:
                self.failed_actions += 1
                log.error("hard-kill %s failed: %s", action.pilot.slot, exc)

    def run(self, cycles: int | None = None) -> int:
        """Cycle every ``interval`` seconds (``cycles`` times, or for ever); how many cycles
        failed (the pool unread, or a vacate or hard-kill that failed)."""
        done = 0
        failed = 0
        while cycles is None or done < cycles:
            before = self.failed_actions
            try:
                self.cycle()
            except GlideinExtError as exc:
                log.error("cycle failed: %s", exc)
                failed += 1
            else:
                failed += self.failed_actions > before
            done += 1
            if cycles is None or done < cycles:
                time.sleep(self.cfg.interval)
        return failed


def _old(seconds: int | None) -> str:
    return "age unknown" if seconds is None else f"{format_duration(seconds)} old"
