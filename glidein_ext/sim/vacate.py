"""A site taking CPUs back from the pilots (Sfiligoi 2013: Sfiligoi et al., "Minimizing draining
waste through extending the lifetime of pilot jobs in Grid environments"), pure.

Each pulling pilot's ``.pilot.ad`` is computed by the real ``glidein.pilotad.compute_pilot_ad``
from what it runs (one CPU, its task's expected end: start + the workflow's mean task length, the
good-faith estimate; its guaranteed end: start + the task's ``max_runtime``); the site sees it as
``site.pilots.Pilot`` (the PILOT_* values its cron publishes) and the real
``site.victims.choose_victims`` picks the victims under the policy.  A victim finishes the task it
runs and leaves (the fully automatic vacate through ``.site.ad``); measured: when each victim's
CPU was free, from the request.

With one-CPU pilots the ``waste`` key (ADD_FINAL_EXP_WASTE1k) is 0 for every pilot (a pilot's one
job ends when the pilot could): the choice falls to the tie-breaks, slot order, i.e. a choice
blind to the jobs' ends; ``completion`` (LAST_EXP_JOB_END, idle pilots first) is the informed one.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from glidein_ext.glidein import pilotad
from glidein_ext.glidein.pilotad import PilotState, RunningJob
from glidein_ext.site.pilots import Pilot
from glidein_ext.site.victims import Policy, Selection, choose_victims

EPOCH = 1_700_000_000  # simulated time 0 as unix seconds (the .pilot.ad's clock)
OWNER = "vo"


@dataclass
class PilotLife:
    """What a pilot's ``.pilot.ad`` is computed from."""

    host: str
    started: float
    job: RunningJob | None = None
    last_job_start: int | None = None


@dataclass
class Vacate:
    """The pilots' lives, the site's request and the victims' departures."""

    expected_runtime: float
    lives: dict[int, PilotLife] = field(default_factory=dict)
    victims: set[int] = field(default_factory=set)
    freed: dict[int, float] = field(default_factory=dict)  # victim -> when its CPU was free
    requested_at: float | None = None
    wanted: int = 0
    chosen: int = 0

    # --- the pilots' side ---

    def joined(self, pilot_id: int, host: str, now: float) -> None:
        self.lives[pilot_id] = PilotLife(host, now)

    def job_started(self, pilot_id: int, task_id: int, now: float, max_runtime: int) -> None:
        life = self.lives.get(pilot_id)
        if life is None:
            return
        start = EPOCH + int(now)
        life.job = RunningJob(
            str(task_id), 1, start, start + round(self.expected_runtime), start + max_runtime
        )
        life.last_job_start = start

    def job_ended(self, pilot_id: int) -> None:
        life = self.lives.get(pilot_id)
        if life is not None:
            life.job = None

    def leaving(self, pilot_id: int) -> bool:
        """The site asked this pilot to go (it starts no new task)."""
        return pilot_id in self.victims

    def left(self, pilot_id: int, now: float) -> None:
        self.freed.setdefault(pilot_id, now)
        self.lives.pop(pilot_id, None)

    # --- the site's side ---

    def pilot_ad(self, pilot_id: int, now: float) -> dict[str, Any]:
        life = self.lives[pilot_id]
        jobs = () if life.job is None else (life.job,)
        state = PilotState(1, EPOCH + int(life.started), jobs, life.last_job_start)
        return pilotad.compute_pilot_ad(state, EPOCH + int(now))

    def slot(self, pilot_id: int) -> str:
        return f"glidein_{pilot_id:05d}@{self.lives[pilot_id].host}"

    def site_view(self, now: float) -> list[Pilot]:
        """Every live pilot as the site's cron publishes it."""
        pilots = []
        for pilot_id in self.lives:
            ad = self.pilot_ad(pilot_id, now)
            pilots.append(
                Pilot(
                    slot=self.slot(pilot_id),
                    owner=OWNER,
                    cpus=1,
                    global_job_id=f"schedd#{pilot_id}.0#0",
                    used1k=int(ad[pilotad.USED_FRACTION1K]),
                    waste1k=int(ad[pilotad.ADD_FINAL_EXP_WASTE1K]),
                    last_exp_job_end=ad.get(pilotad.LAST_EXP_JOB_END),
                    priority_factor=int(ad[pilotad.PRIORITY_FACTOR]),
                    can_postpone=bool(ad[pilotad.CAN_POSTPONE_LAST_JOB]),
                )
            )
        return pilots

    def request(self, now: float, cpus: int, policy: str) -> Selection:
        """The site needs ``cpus`` CPUs back: the real victim choice; the victims will leave."""
        by_slot = {self.slot(pilot_id): pilot_id for pilot_id in self.lives}
        selection = choose_victims(self.site_view(now), {OWNER: 1.0}, cpus, Policy(policy))
        self.requested_at = now
        self.wanted = cpus
        self.victims.update(by_slot[choice.pilot.slot] for choice in selection.victims)
        self.chosen = len(self.victims)
        return selection

    def summary(self) -> dict[str, Any]:
        """``drain_max``: seconds until the site had every CPU back; ``drain_mean``: per CPU;
        ``drained``: CPUs free by the end of the run."""
        if self.requested_at is None:
            return {"drain_max": None, "drain_mean": None, "drained": 0}
        waits = [self.freed[p] - self.requested_at for p in self.victims if p in self.freed]
        complete = len(waits) == self.chosen and self.chosen >= self.wanted
        return {
            "drain_max": max(waits) if complete and waits else None,
            "drain_mean": statistics.fmean(waits) if waits else None,
            "drained": len(waits),
        }
