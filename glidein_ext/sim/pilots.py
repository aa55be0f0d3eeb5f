"""Simulated pilots that pull from the Task Queue (pre-DHT and centralized), the pilots' task
execution, and the direct grid submission without pilots (Hasham 2011 §V, "noTQ").

A pulling pilot does what the real agent does (``agent.agent``): register, then ask for a task;
an empty answer makes it wait ``poll_interval * 1.5**n`` (at most ``poll_max``) before asking
again; a task is staged in, run and staged out, then reported; a pre-DHT pilot then sends its
cache list at once (the file tracking of Delgado Peris 2014 §IV.A), a centralized one publishes its
files in
the site DHT before reporting and sends its cache list with each request.  A second process
heartbeats every ``heartbeat_interval`` (pre-DHT with the cache list; with cache-per-host the
answer names the host's pilots, whose new files it links).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

from glidein_ext.sim.context import Context
from glidein_ext.sim.taskqueue import Outcome
from glidein_ext.sim.workload import SimTask


def execute(
    ctx: Context, pilot_id: int, task: SimTask, attempt: int, dht: bool
) -> Generator[Any, Any, Outcome]:
    """Stage in, run, stage out (Hasham 2011 §IV): the attempt's outcome, with the pilot's times."""
    env, caches, recorder = ctx.env, ctx.caches, ctx.recorder
    started = env.now
    recorder.started(pilot_id, started)
    if ctx.vacate is not None:
        ctx.vacate.job_started(pilot_id, task.task_id, started, task.spec.max_runtime)
    fetched = caches.stage_in(pilot_id, task.inputs, dht)
    yield env.timeout(fetched.seconds)
    ok = fetched.ok
    if ok:
        recorder.stage_in.append(fetched.seconds)
        yield env.timeout(ctx.runtime())
        stored = caches.stage_out(pilot_id, task.outputs)
        yield env.timeout(stored.seconds)
        ok = stored.ok
    recorder.ended(pilot_id, env.now, ok)
    if ctx.vacate is not None:
        ctx.vacate.job_ended(pilot_id)
    return Outcome(task.task_id, attempt, ok, started, env.now, fetched.origins)


def dht_publish_time(ctx: Context, files: int) -> float:
    """Storing a file's location at the k closest nodes: a lookup and the stores, per file."""
    if files == 0:
        return 0.0
    hops = max(1, math.ceil(math.log2(max(2, ctx.config.pilots // ctx.config.sites))))
    return files * 2 * (hops + 1) * ctx.config.network.lan_latency


def pulling_pilot(ctx: Context, index: int, pilot_id: int) -> Generator[Any, Any, None]:
    """One pre-DHT or centralized pilot, from its registration on."""
    env, config, tq, caches = ctx.env, ctx.config, ctx.tq, ctx.caches
    site, host = ctx.site_of(index), ctx.host_of(index)
    centralized = config.architecture == "centralized"
    caches.join(pilot_id, site, host)
    yield from tq.call("register", tq.register(pilot_id, site, host))
    if ctx.vacate is not None:
        ctx.vacate.joined(pilot_id, host, env.now)
    env.process(heartbeats(ctx, pilot_id))
    empty = 0
    while not tq.finished.triggered:
        if ctx.vacate is not None and ctx.vacate.leaving(pilot_id):
            # Sfiligoi 2013: a victim starts nothing new; it deregisters and its CPU is the site's
            ctx.vacate.left(pilot_id, env.now)
            yield from tq.call("deregister", tq.deregister(pilot_id))
            caches.leave(pilot_id)
            return
        cached = caches.cached(pilot_id) if centralized else None
        got = yield from tq.call("request", tq.request(pilot_id, cached))
        if got is None:
            yield env.timeout(min(config.poll_max, config.poll_interval * 1.5**empty))
            empty += 1
            continue
        task, attempt = got
        outcome = yield from execute(ctx, pilot_id, task, attempt, centralized)
        if centralized:
            yield env.timeout(dht_publish_time(ctx, len(task.outputs) + len(task.inputs)))
        yield from tq.call("complete", tq.complete(pilot_id, outcome))
        if not centralized:  # pre-DHT: the cache list right after each task
            yield from tq.call("heartbeat", tq.heartbeat(pilot_id, caches.cached(pilot_id)))
        empty = 0


def heartbeats(ctx: Context, pilot_id: int) -> Generator[Any, Any, None]:
    env, config, tq, caches = ctx.env, ctx.config, ctx.tq, ctx.caches
    yield env.timeout(ctx.delays.uniform(0, config.heartbeat_interval))
    while not tq.finished.triggered:
        if ctx.vacate is not None and pilot_id in ctx.vacate.freed:
            return  # the pilot left
        cached = caches.cached(pilot_id) if config.architecture == "pre-dht" else None
        yield from tq.call("heartbeat", tq.heartbeat(pilot_id, cached))
        caches.link_host(pilot_id)
        yield env.timeout(config.heartbeat_interval)


def direct_job(ctx: Context, slots: Any, task: SimTask, attempt: int) -> Generator[Any, Any, None]:
    """Hasham 2011 §V, direct submission (no TQ, no pilots, no cache): the grid's scheduling
    latency, a batch slot, the task reading from and writing to the SE, and the grid's delay
    before the workflow system notices the end (and submits what it released, or resubmits)."""
    env, grid, tq = ctx.env, ctx.config.grid, ctx.tq
    yield env.timeout(ctx.delays.expovariate(1.0 / grid.submit_latency))
    worker = -task.task_id  # a batch slot, not a pilot: one id per task
    with slots.request() as slot:
        yield slot
        ctx.caches.join(worker, 0, f"grid{task.task_id}")
        outcome = yield from execute(ctx, worker, task, attempt, False)
        ctx.caches.leave(worker)
    yield env.timeout(ctx.delays.expovariate(1.0 / grid.notify_latency))
    tq.complete(worker, outcome)()


def direct_dispatch(ctx: Context, slots: Any) -> None:
    """Every task queued goes to the grid at once (the workflow system submits it)."""
    tq = ctx.tq
    for task_id in list(tq.queued):
        attempt = tq.take(task_id, 0)
        ctx.env.process(direct_job(ctx, slots, tq.tasks[task_id], attempt))
