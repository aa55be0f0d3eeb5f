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

``cache`` (CACHED_INPUT_NEEDED_MB, then LAST_EXP_JOB_END) spares the pilots whose caches hold
the inputs of tasks still to run: the Task Queue knows both (its queued tasks, the tasks waiting
for an input, and each pilot's cache list), and ``needs`` gives each pilot's value at the
request, as ``cache.need`` computes it.  Measured too: ``se_rereads``, the storage-element reads,
after a victim left, of the files it cached when it left (what the vacate cost the SE).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from glidein_ext.cache.need import needed_mb
from glidein_ext.glidein import pilotad
from glidein_ext.glidein.pilotad import PilotAdInputs, RunningJob
from glidein_ext.sim.storage import Caches
from glidein_ext.sim.taskqueue import SimTaskQueue
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
    # What the Task Queue knows: each pilot's CACHED_INPUT_NEEDED_MB (called once per request),
    # a pilot's cached files, and how many stage-ins read a file from the SE so far.
    needs: Callable[[], Mapping[int, int]] = dict
    files_of: Callable[[int], Collection[str]] = lambda pilot_id: ()
    se_reads_of: Callable[[str], int] = lambda lfn: 0
    lost: dict[str, int] = field(default_factory=dict)  # LFN -> SE reads when its victim left
    victims_needed_mb: int = 0
    _need: Mapping[int, int] = field(default_factory=dict)

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
        """A pilot left (its cache still listed): a victim's files count as lost from now."""
        if pilot_id in self.victims:
            for lfn in self.files_of(pilot_id):
                self.lost.setdefault(lfn, self.se_reads_of(lfn))
        self.freed.setdefault(pilot_id, now)
        self.lives.pop(pilot_id, None)

    # --- the site's side ---

    def pilot_ad(self, pilot_id: int, now: float) -> dict[str, Any]:
        life = self.lives[pilot_id]
        jobs = () if life.job is None else (life.job,)
        state = PilotAdInputs(
            1,
            EPOCH + int(life.started),
            jobs,
            life.last_job_start,
            cached_input_needed_mb=self._need.get(pilot_id),
        )
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
                    cached_needed_mb=_int_or_none(ad.get(pilotad.CACHED_INPUT_NEEDED_MB)),
                )
            )
        return pilots

    def request(self, now: float, cpus: int, policy: str) -> Selection:
        """The site needs ``cpus`` CPUs back: the real victim choice; the victims will leave."""
        by_slot = {self.slot(pilot_id): pilot_id for pilot_id in self.lives}
        self._need = self.needs()
        selection = choose_victims(self.site_view(now), {OWNER: 1.0}, cpus, Policy(policy))
        self.requested_at = now
        self.wanted = cpus
        self.victims.update(by_slot[choice.pilot.slot] for choice in selection.victims)
        self.chosen = len(self.victims)
        self.victims_needed_mb = sum(
            choice.pilot.cached_needed_mb or 0 for choice in selection.victims
        )
        return selection

    def summary(self) -> dict[str, Any]:
        """``drain_max``: seconds until the site had every CPU back; ``drain_mean``: per CPU;
        ``drained``: CPUs free by the end of the run; ``se_rereads``: SE reads, after its victim
        left, of a file a victim cached; ``victims_needed_mb``: their CACHED_INPUT_NEEDED_MB at
        the request."""
        if self.requested_at is None:
            return {
                "drain_max": None,
                "drain_mean": None,
                "drained": 0,
                "se_rereads": 0,
                "victims_needed_mb": 0,
            }
        waits = [self.freed[p] - self.requested_at for p in self.victims if p in self.freed]
        complete = len(waits) == self.chosen and self.chosen >= self.wanted
        return {
            "drain_max": max(waits) if complete and waits else None,
            "drain_mean": statistics.fmean(waits) if waits else None,
            "drained": len(waits),
            "se_rereads": sum(self.se_reads_of(lfn) - at for lfn, at in self.lost.items()),
            "victims_needed_mb": self.victims_needed_mb,
        }


def connect(vacate: Vacate, tq: SimTaskQueue, caches: Caches, file_size: int) -> None:
    """What the Task Queue and the caches tell the vacate (the module docstring's ``cache``)."""

    def needs() -> dict[int, int]:
        pending = [*tq.queued, *tq.deps.waiting_ids()]
        inputs = [tq.tasks[task_id].inputs for task_id in pending]
        return {
            pilot_id: needed_mb(dict.fromkeys(caches.cached(pilot_id), file_size), inputs)
            for pilot_id in vacate.lives
        }

    vacate.needs = needs
    vacate.files_of = caches.cached
    vacate.se_reads_of = caches.se_reads.__getitem__


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
