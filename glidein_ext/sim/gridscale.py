"""The Task Queue at the size of the CMS global pool (100 sites, 150,000 pilots, 1,000,000 tasks),
by an aggregate model, pure: how many Task Queue instances each architecture needs.

The event simulator (``sim.engine``) follows every pilot, call and file through the real cores;
its cost grows with pilots x calls (the real matcher keeps every pilot and its cache): on the
2-core development machine pre-DHT at 15,000 pilots and 50,000 tasks took about 10 minutes and
the distributed architecture at 1,500 pilots over a minute; 150,000 pilots and a million tasks
would take hours at least.  This model keeps what decides the answer, the load each
architecture offers the Task Queue and the queue in front of it, and computes it in closed form:

- **The Task Queue**: ``k`` instances over one PostgreSQL database, each serving calls one at a
  time, so an M/M/k queue (Erlang C) of ``k`` servers with the mean service time of the calls.
  A call costs ``call_cost`` s (2.3-4.4 ms of CPU today, 1 ms targeted) plus ``per_row`` per row
  a bulk call reads or writes (``sim.config.TqCosts``).  The pool's capacity, ``k / call_cost``
  calls a second, is what was measured up to four instances on 16 cores (195, 414, 609 and 860
  calls/s: within 10 % of linear at about 4.6 ms a call); beyond four it is an extrapolation
  that assumes the database keeps up.  One SQLite instance serves about 435 calls/s (2.3 ms a
  call) and cannot be shared: it is the ``k = 1`` point of the 2.3 ms column.
- **Pre-DHT and centralized** (Delgado Peris 2014 §II, §III.A): every pilot calls the Task Queue
  itself: per task a request and a completion, pre-DHT also a heartbeat with its cache list (the
  file tracking); every pilot heartbeats every ``heartbeat`` s; an idle pilot polls every
  ``poll_max`` s (its back-off's ceiling).  The inter-task delay is the chain of those calls,
  each a round trip, the service and the queue's mean wait (centralized adds the DHT publication
  of the task's files).  The first burst: at the submission every pilot is polling; each must
  get one answered request while the heartbeats keep coming, so the burst lasts
  ``pilots / (capacity - heartbeat rate)``, and at least one poll period.
- **Distributed** (Delgado Peris 2014 §III.B-C): only each site's master calls, once per round a
  ``sync`` (the completions, the released tasks, ``4`` offers per idle worker, at most 2,000)
  and an ``assign`` (one row per pair).  A round comes when no completion came for a
  ``round_window``, at most five windows after the first (``sched.rounds``: :func:`batch`), and
  at least every ``round_period``; it takes the two calls, the TaskList's trip down and up the
  site's DHT tree (``fanout``) with its decoding, the workers' ranking and the master's
  assignment (the calibrated costs, ``sim.calibration``).  The inter-task delay is the batch (its
  first completion waits all of it) and the round: 0.41 s at 1,500 pilots, two sites and 3 ms a
  call, as the event simulator measures (0.41 s, and 0.78 calls per task against 0.77).
  The first burst: each master finds the workflow at its next round (within a period)
  and serves all its idle workers in one round (the TaskList budget holds 2,000 offers and the
  replies' budget 3 ranks for each of 1,500 workers); the Task Queue serves the 100 sites'
  rounds in turn.

Steady state (the middle of the workflow: every pilot busy, 1,000,000 tasks keep them so for
hours) is found by iterating throughput -> load -> wait -> delay -> throughput.  What the model
leaves out: the workflow's tail (fewer runnable tasks than pilots), waitForData holds, failures
and retries, and the database's own limit past four instances.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from glidein_ext.errors import UsageError
from glidein_ext.sched.rounds import MAX_BATCH, MAX_WANT, WANT_PER_IDLE, full_batch
from glidein_ext.sim.calibration import REFERENCE, CostModel
from glidein_ext.sim.config import SimConfig

ARCHITECTURES = ("pre-dht", "centralized", "distributed")
# Calls per second of the Task Queue pool measured on 16 cores (PostgreSQL, 1-4 instances) and
# of one SQLite instance, at today's per-call cost.
POSTGRES_MEASURED = {1: 195.0, 2: 414.0, 3: 609.0, 4: 860.0}
SQLITE_MEASURED = 435.0
CALL_COSTS = {"today, high (4.4 ms)": 0.0044, "today, low (2.3 ms)": 0.0023, "target (1 ms)": 0.001}
FIRST_BURST_TARGET = 60.0  # seconds
DELAY_TARGET = 1.0  # seconds, the median inter-task delay


@dataclass(frozen=True)
class Scale:
    """The pool and the time constants (the event simulator's defaults, ``sim.config``)."""

    pilots: int = 150_000
    sites: int = 100
    tasks: int = 1_000_000
    runtime: float = 198.0
    call_cost: float = 0.0044
    per_row: float = 1e-4
    latency: float = 0.025  # one way, pilot (or master) to Task Queue
    lan: float = 0.0005
    heartbeat: float = 30.0
    poll_max: float = 10.0
    round_window: float = 0.2
    round_period: float = 2.0
    master_timeout: float = 60.0
    fanout: int = 8
    decode_per_task: float = 5.7e-6
    files_per_task: int = 2  # an input and an output (W1)

    def __post_init__(self) -> None:
        if self.pilots < 2 * self.sites or self.sites < 1 or self.tasks < 1:
            raise UsageError("a pool needs at least one site, two pilots a site and one task")
        if self.call_cost <= 0 or self.per_row < 0:
            raise UsageError("the per-call cost must be positive and the per-row cost not negative")

    @classmethod
    def from_config(cls, config: SimConfig, call_cost: float) -> Scale:
        """The event simulator's run ``config`` as a scale (what the validation compares)."""
        net = config.network
        return cls(
            pilots=config.pilots,
            sites=config.sites,
            tasks=config.tasks,
            runtime=config.runtime_mean,
            call_cost=call_cost,
            per_row=config.costs.per_row,
            latency=net.tq_latency,
            lan=net.lan_latency,
            heartbeat=config.heartbeat_interval,
            poll_max=config.poll_max,
            round_window=config.round_window,
            round_period=config.round_period,
            master_timeout=config.master_timeout,
            fanout=net.fanout,
            decode_per_task=net.decode_per_task,
        )

    def with_cost(self, call_cost: float) -> Scale:
        return replace(self, call_cost=call_cost)


@dataclass(frozen=True)
class Estimate:
    """One architecture at one size, cost and number of instances."""

    architecture: str
    instances: int
    call_cost: float
    calls_per_s: float  # offered load, steady state
    utilization: float  # of the pool, steady state
    requests_per_task: float
    delay_median: float  # s; inf when the pool cannot keep up
    first_burst: float  # s; inf when the pool cannot keep up
    idle_utilization: float  # of the pool before the submission (pilots polling)

    @property
    def meets(self) -> bool:
        return self.first_burst < FIRST_BURST_TARGET and self.delay_median < DELAY_TARGET


def erlang_c(servers: int, load: float) -> float:
    """The probability that a call waits in an M/M/``servers`` queue offered ``load`` Erlangs."""
    if load <= 0:
        return 0.0
    if load >= servers:
        return 1.0
    blocking = 1.0  # Erlang B, by the stable recurrence
    for n in range(1, servers + 1):
        blocking = load * blocking / (n + load * blocking)
    return blocking / (1.0 - (load / servers) * (1.0 - blocking))


def mean_wait(servers: int, rate: float, service: float) -> float:
    """The mean time a call waits for a server (inf when the offered load reaches capacity)."""
    load = rate * service
    if load >= servers:
        return math.inf
    return erlang_c(servers, load) * service / (servers - load)


def capacity(instances: int, call_cost: float) -> float:
    """Calls a second of ``instances`` Task Queue instances (module docstring)."""
    return instances / call_cost


def _pulling(scale: Scale, arch: str, k: int) -> Estimate:
    calls = 3 if arch == "pre-dht" else 2  # per task: request, completion (, cache heartbeat)
    heartbeats = scale.pilots / scale.heartbeat
    publish = 0.0
    if arch == "centralized":
        hops = max(1, math.ceil(math.log2(max(2, scale.pilots // scale.sites))))
        publish = scale.files_per_task * 2 * (hops + 1) * scale.lan
    delay = calls * (2 * scale.latency + scale.call_cost) + publish
    rate = service = wait = math.inf
    for _ in range(50):
        throughput = scale.pilots / (scale.runtime + delay)
        rate = calls * throughput + heartbeats
        busy = rate * scale.call_cost + throughput * scale.per_row  # a completion releases one
        service = busy / rate
        wait = mean_wait(k, rate, service)
        if math.isinf(wait):
            delay = math.inf
            break
        new = calls * (2 * scale.latency + service + wait) + publish
        if abs(new - delay) < 1e-9:
            delay = new
            break
        delay = new
    throughput = scale.pilots / (scale.runtime + (0.0 if math.isinf(delay) else delay))
    idle_rate = scale.pilots / scale.poll_max + heartbeats
    drain = capacity(k, scale.call_cost) - heartbeats
    if drain <= 0:
        burst = math.inf
    else:
        polling = scale.poll_max if idle_rate * scale.call_cost < k else 0.0
        burst = max(polling, scale.pilots / drain) + 2 * scale.latency + scale.call_cost
    return Estimate(
        arch,
        k,
        scale.call_cost,
        rate,
        min(1.0, rate * service / k),
        rate / throughput,
        delay,
        burst,
        min(1.0, idle_rate * scale.call_cost / k),
    )


def _tree(scale: Scale, shown: float) -> float:
    """The TaskList's trip down the site's DHT tree (decoded at each hop) and the replies' up."""
    workers = max(2, scale.pilots // scale.sites - 1)
    depth = max(1, math.ceil(math.log(workers, scale.fanout)))
    return depth * (scale.lan + scale.decode_per_task * shown) + depth * scale.lan


def batch(rate: float, window: float, full: int = 0) -> float:
    """Seconds from a site's first completion to its round (``sched.rounds``): the round comes
    when no completion came for a window, at most ``MAX_BATCH`` windows after the first, or once
    ``full`` completions came (``RoundBook.full_batch``; 0: not modelled).  With completions a
    Poisson stream of ``rate``, the wait for a quiet window is ``(e^(rate window) - 1) / rate``
    and the wait for ``full`` of them ``(full - 1) / rate`` after the first."""
    if rate <= 0:
        return window
    waited = min(MAX_BATCH * window, max(window, math.expm1(rate * window) / rate))
    return min(waited, (full - 1) / rate) if full > 1 else waited


def _distributed(scale: Scale, k: int, costs: CostModel) -> Estimate:
    sites = scale.sites
    workers = scale.pilots - sites
    per_site = workers / sites
    heartbeat = max(0.5, scale.master_timeout / 3)
    rate = service = 0.0
    delay = 2 * scale.round_window
    for _ in range(100):
        throughput = workers / (scale.runtime + delay)
        completions = throughput / sites  # a second, at one site
        gathered = batch(completions, scale.round_window, full_batch(per_site))
        # A round: the sync, the TaskList down the tree and the ranks up, the assignment, the
        # assign; the next batch starts with the next completion.
        done = completions * (gathered + 1.0 / completions)  # completions a round carries
        offers = min(MAX_WANT, WANT_PER_IDLE * max(1.0, done))
        sync = scale.call_cost + scale.per_row * (2 * done + offers)
        assign = scale.call_cost + scale.per_row * done
        pairs = done * min(3.0, offers)
        work = (
            _tree(scale, offers)
            + costs.rank_time(int(offers))
            + costs.assign_time(int(pairs))
            + 2 * scale.lan
        )
        rate_guess = rate
        wait = 0.0 if rate_guess <= 0 else mean_wait(k, rate_guess, service)
        if math.isinf(wait):
            delay = math.inf
            break
        round_time = 2 * (2 * scale.latency + wait) + sync + assign + work
        rounds = max(1.0 / scale.round_period, 1.0 / (1.0 / completions + gathered + round_time))
        syncs = max(0.0, 1.0 / heartbeat - rounds)  # heartbeats between rare rounds
        rate = sites * (2 * rounds + syncs)
        busy = sites * (rounds * (sync + assign) + syncs * scale.call_cost)
        service = busy / rate
        if busy >= k:
            delay = math.inf
            break
        # The batch's first completion waits the whole batch, then the round.
        new_delay = gathered + round_time
        if abs(new_delay - delay) < 1e-9 and rate_guess == rate:
            delay = new_delay
            break
        delay = new_delay
    throughput = workers / (scale.runtime + (0.0 if math.isinf(delay) else delay))
    # The first burst: a site finds the workflow at its next round (within a period) and serves
    # its idle workers (up to MAX_WANT offers) in one round per MAX_WANT / WANT_PER_IDLE workers.
    idle_rate = sites / scale.round_period
    want = min(MAX_WANT, WANT_PER_IDLE * per_site)
    assigned = min(per_site, want)
    rounds_needed = math.ceil(per_site / assigned)
    per_round = 2 * scale.call_cost + scale.per_row * (want + assigned)
    pairs = assigned * min(3.0, want)
    round_time = (
        4 * scale.latency
        + per_round
        + _tree(scale, want)
        + costs.rank_time(int(want))
        + costs.assign_time(int(pairs))
    )
    queued = sites * per_round / k  # every site's round at the Task Queue at once
    idle_load = idle_rate * scale.call_cost / k
    if idle_load >= 1:
        burst = math.inf
    else:
        burst = scale.round_period + rounds_needed * max(round_time, queued / (1 - idle_load))
    return Estimate(
        "distributed",
        k,
        scale.call_cost,
        rate,
        min(1.0, rate * service / k),
        rate / throughput,
        delay,
        burst,
        min(1.0, idle_load),
    )


def estimate(scale: Scale, arch: str, instances: int, costs: CostModel = REFERENCE) -> Estimate:
    """Steady load, median inter-task delay and first burst of ``arch`` on ``instances``."""
    if instances < 1:
        raise UsageError("at least one Task Queue instance")
    if arch == "distributed":
        return _distributed(scale, instances, costs)
    if arch in ARCHITECTURES:
        return _pulling(scale, arch, instances)
    raise UsageError(f"unknown architecture {arch!r} (choose from {', '.join(ARCHITECTURES)})")


def instances_needed(
    scale: Scale, arch: str, costs: CostModel = REFERENCE, most: int = 4096
) -> Estimate | None:
    """The fewest instances that meet both targets (first burst < 60 s, median delay < 1 s), or
    None when even ``most`` do not."""
    low, high = 1, most
    if not estimate(scale, arch, high, costs).meets:
        return None
    while low < high:  # more instances never hurt: bisect
        middle = (low + high) // 2
        if estimate(scale, arch, middle, costs).meets:
            high = middle
        else:
            low = middle + 1
    return estimate(scale, arch, low, costs)
