"""One simulated run: the pilots arrive (already running, on demand through the real
PilotMonitor plan, or no pilots at all: direct grid submission), the workflow is submitted, and
the run ends when its last task ended.  ``simulate`` returns the recorder's summary, the one
row the experiments write."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

import simpy

from glidein_ext.errors import UsageError
from glidein_ext.sim.calibration import REFERENCE, CostModel
from glidein_ext.sim.config import SimConfig
from glidein_ext.sim.context import Context, make_rng
from glidein_ext.sim.master import SiteMaster
from glidein_ext.sim.pilots import direct_dispatch, pulling_pilot
from glidein_ext.sim.recorder import Recorder
from glidein_ext.sim.storage import Caches
from glidein_ext.sim.taskqueue import SimTaskQueue
from glidein_ext.sim.vacate import Vacate, connect
from glidein_ext.sim.workload import build
from glidein_ext.tq.manager.monitor import SiteView, Thresholds, plan
from glidein_ext.tq.models import PilotInfo


@dataclass
class SimResult:
    config: SimConfig
    summary: dict[str, Any]
    recorder: Recorder


def submit_time(config: SimConfig) -> float:
    """When the workflow arrives after already-running pilots started: once they registered."""
    if config.submission != "running":
        return 0.0
    return 10.0 + 0.01 * config.pilots


def _running(ctx: Context) -> int:
    """Start every pilot now (each registers within two seconds); the pilots that run tasks."""
    config, env = ctx.config, ctx.env
    if config.architecture == "distributed":
        workers = 0
        masters = {}
        for site in range(config.sites):
            masters[site] = SiteMaster(ctx, site, 1 + site)
            env.process(masters[site].run())
        for index in range(config.pilots - config.sites):
            site = ctx.site_of(index)
            pilot_id = 1 + config.sites + index
            env.process(
                _later(ctx, ctx.delays.uniform(0.5, 2.0), masters[site].worker(index, pilot_id))
            )
            workers += 1
        return workers
    for index in range(config.pilots):
        env.process(_later(ctx, ctx.delays.uniform(0, 2.0), pulling_pilot(ctx, index, index + 1)))
    return config.pilots


def _later(ctx: Context, delay: float, body: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
    yield ctx.env.timeout(delay)
    return (yield from body)


def _monitor(ctx: Context) -> Generator[Any, Any, None]:
    """Hasham 2011 §IV-A: every ``monitor_interval`` the real ``tq.manager.monitor.plan`` decides
    how
    many pilots to submit; each waits in the site's batch queue before it registers."""
    config, env, tq = ctx.config, ctx.env, ctx.tq
    limits = Thresholds(min_pilots=0, max_pilots=config.pilots, min_idle_pilots=0)
    template = PilotInfo(0, site="S0")
    submitted = 0
    arrived: list[int] = []

    def arrive(index: int, pilot_id: int) -> Generator[Any, Any, None]:
        yield env.timeout(ctx.delays.expovariate(1.0 / config.grid.batch_queue))
        arrived.append(pilot_id)
        yield from pulling_pilot(ctx, index, pilot_id)

    while not tq.finished.triggered:
        pilots = [tq.matcher.pilot(p) for p in arrived]
        idle = sum(1 for p in pilots if p is not None and p.idle)
        view = SiteView(
            inactive=submitted - len(arrived),
            idle=idle,
            busy=len(arrived) - idle,
            queued_groups=tq.matcher.queued_groups_for(template, env.now),
        )
        for _ in range(plan(limits, view).count):
            env.process(arrive(submitted, submitted + 1))
            submitted += 1
        yield env.timeout(config.grid.monitor_interval)


# The cyclic garbage collector's thresholds while a run goes on (``gc.set_threshold``).  A run
# keeps millions of objects alive (tasks, pilots, events) and makes short-lived ones by the
# thousand a round; with the default 700 allocations per young collection the collector
# re-examined them 20,000 times in a 6,000-pilot run, a quarter of its CPU.
RUN_GC_THRESHOLDS = (100_000, 50, 1000)


@contextlib.contextmanager
def _batch_collection() -> Iterator[None]:
    """Collect cycles seldom while the run goes on; the process's thresholds after it."""
    before = gc.get_threshold()
    gc.set_threshold(*RUN_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def simulate(config: SimConfig, costs: CostModel = REFERENCE) -> SimResult:
    """Run one configuration to the end of its workflow (or ``config.horizon``)."""
    if config.submission == "monitor" and config.architecture == "distributed":
        raise UsageError("the PilotMonitor runs are of pulling pilots (pre-dht, centralized)")
    env = simpy.Environment()
    recorder = Recorder()
    tasks = build(config.workflow, config.scale())
    tq = SimTaskQueue(env, config, costs, recorder, tasks)
    caches = Caches(config, make_rng(config.seed, "se"))
    ctx = Context(
        env,
        config,
        costs,
        recorder,
        tq,
        caches,
        make_rng(config.seed, "runtimes"),
        make_rng(config.seed, "delays"),
        Vacate(config.runtime_mean) if config.vacate_cpus else None,
    )
    if ctx.vacate is not None:
        connect(ctx.vacate, tq, caches, config.file_size)
    initial = len(tq.deps.initial())
    if config.submission == "direct":
        slots = simpy.Resource(env, capacity=config.pilots)
        tq.changed.append(lambda: direct_dispatch(ctx, slots))
        workers = 0
    elif config.submission == "monitor":
        env.process(_monitor(ctx))
        workers = config.pilots
    else:
        workers = _running(ctx)

    def submit() -> Generator[Any, Any, None]:
        yield env.timeout(submit_time(config))
        tq.submit()
        if ctx.vacate is not None:
            yield env.timeout(config.vacate_at)
            ctx.vacate.request(env.now, config.vacate_cpus, config.victim_policy)

    env.process(submit())
    with _batch_collection():
        env.run(until=env.any_of([tq.finished, env.timeout(config.horizon)]))
    expected = min(workers, initial) if workers else 0
    summary = recorder.summary(expected)
    summary["se_reads"] = sum(caches.se_reads.values())  # stage-ins that read the SE
    if ctx.vacate is not None:
        summary.update(ctx.vacate.summary())
    return SimResult(config, summary, recorder)
