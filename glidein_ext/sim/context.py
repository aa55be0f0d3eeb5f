"""What every simulated actor shares: the SimPy environment, the run's configuration and cost
model, the Task Queue, the caches, the recorder and the seeded random streams (one per concern,
so that a change in one part of the model does not reshuffle the others)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import simpy

from glidein_ext.sim.calibration import CostModel
from glidein_ext.sim.config import SimConfig
from glidein_ext.sim.recorder import Recorder
from glidein_ext.sim.storage import Caches
from glidein_ext.sim.taskqueue import SimTaskQueue
from glidein_ext.sim.vacate import Vacate


@dataclass
class Context:
    env: simpy.Environment
    config: SimConfig
    costs: CostModel
    recorder: Recorder
    tq: SimTaskQueue
    caches: Caches
    runtimes: random.Random  # the tasks' lengths
    delays: random.Random  # batch queues, grid latencies, phases
    vacate: Vacate | None = None  # Sfiligoi 2013: the pilots' .pilot.ad and the site's request

    def runtime(self) -> float:
        config = self.config
        return max(1.0, self.runtimes.gauss(config.runtime_mean, config.runtime_sd))

    def site_of(self, index: int) -> int:
        """Hosts are spread over the sites in turn; a host's pilots are of its site."""
        return (index // self.config.pilots_per_host) % self.config.sites

    def host_of(self, index: int) -> str:
        return f"wn{index // self.config.pilots_per_host:05d}"


def make_rng(seed: int, concern: str) -> random.Random:
    return random.Random(f"{seed}/{concern}")
