"""The Task Queue at the size of the CMS global pool (100 sites, 150,000 pilots, 1,000,000 tasks),
by an aggregate model, pure: how many Task Queue instances each architecture needs.

The event simulator (``sim.engine``) follows every pilot, call and file through the real cores;
this model follows the same mechanisms in aggregate, as numbers of pilots, calls and rounds, so
that it answers at any size in well under a second (docs/results.md, "Grid scale").  Each metric
is what the simulator measures over a whole run of W1 (serial chains: each step-0 task's output is
read by one step-1 task, Delgado Peris 2014 §IV), from the submission to the last task's end:

- **The Task Queue**: ``k`` instances over one database, each serving calls one at a time, an
  M/M/k queue (Erlang C) of the calls' mean service time: ``call_cost`` a call plus ``per_row``
  per row a bulk call reads or writes (``sim.config.TqCosts``).  The costs come from this tree's
  benches (:data:`CALL_COSTS`, :data:`SQLITE_MEASURED`).
- **The workflow in time**: ``tasks / 2`` chains on the pilots that run tasks, in waves: a pilot
  runs a chain's two tasks one after the other (the step-1 task reads what it just wrote: the
  matcher's locality pass, the master's successors), then the next chain.  Wave ``j`` ends
  ``2 (runtime + delay)`` after wave ``j - 1``; a task's end spreads as the sum of the runtimes
  before it (``runtime_sd`` each), and the run ends with the latest chain of the last wave (the
  expected maximum of as many normal variables).
- **Pre-DHT and centralized** (Delgado Peris 2014 §II, §III.A; ``sim.pilots``): calls per task: a
  request and a completion, pre-DHT also its cache-list heartbeat; every pilot heartbeats every
  ``heartbeat`` s for the whole run; a pilot without a task polls with the agent's back-off
  (``poll_interval * 1.5**n``, at most ``poll_max``): its idle time (the pilots' time in the run
  less the tasks' runs and calls) divided by the back-off's ceiling, plus for each idle stretch
  (every pilot's last, at the workflow's end) the shorter polls of the back-off's start.  The
  inter-task delay is the chain of a task's calls, each a round trip, its service and the queue's
  mean wait (centralized adds the DHT publication of the task's files).  The first burst: the
  pilots register within two seconds of one another and poll the empty queue with the back-off
  until the submission (``sim.engine.submit_time``); :func:`poll_burst` follows them in cohorts
  through the one FIFO server: the burst ends when the last of them has its first task.
- **Distributed** (Delgado Peris 2014 §III.B-C; ``sim.master``): only each site's master calls.  A
  round comes when no completion came for a ``round_window``, at most ``MAX_BATCH`` windows after
  the first, or once a tenth of the site's workers are free (``sched.rounds``: :func:`batch`); in
  steady state the master holds its offers (the successors the Task Queue named with each placed
  task, ``sched.stock``), so a round makes one call, its ``assign``, carrying the completions; the
  master ``sync``s at least every ``master_timeout / 3``.  Rounds per run: the completions' rate
  at each site in time (the waves above), each stretch of ``1 / rate`` s of it batched as
  :func:`batch` says.  The inter-task delay: the batch, the round (the TaskList down the site's
  DHT tree with its decoding, the workers' ranking, the master's assignment, the calibrated
  costs of ``sim.calibration``), the ``assign``, the hand-out and the DHT publication of the
  task's files.  The first burst: each master's long poll answers at the submission (the sites'
  ``sync``s of up to ``MAX_WANT`` offers served in turn), then rounds of the idle workers until
  each has a task, a round placing about a quarter of its TaskList (the workers' best ranks fall
  in its first quarter, ``sched.ranking``).

The steady state (the middle of the workflow: every pilot busy) gives the load on the Task Queue
(calls a second, utilization), found by iterating throughput -> load -> wait -> delay ->
throughput.  What the model leaves out: waitForData holds, failures and retries, and the
database's own limit past four instances.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import random
import statistics
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from glidein_ext.errors import UsageError
from glidein_ext.sched.rounds import MAX_BATCH, MAX_WANT, WANT_PER_IDLE, full_batch
from glidein_ext.sched.tasklist import reply_limit
from glidein_ext.sim.calibration import REFERENCE, CostModel
from glidein_ext.sim.config import Network, SimConfig, TqCosts

ARCHITECTURES = ("pre-dht", "centralized", "distributed")
# Calls a second of a Task Queue pool in the request loop, by instances (PostgreSQL), and the
# per-call costs: ``bench/pool_bench.py`` and ``bench/tq_bench.py --burst-only`` on the 16-core
# machine, 2026-11-27, evening (docs/tq.md, "Benchmarks"): 1,416 calls/s for one pool instance
# (0.71 ms a call), 0.51-0.67 ms of the TQ's CPU a pool call, 0.31-0.34 ms a SQLite call.
POSTGRES_MEASURED = {1: 1416.0, 2: 2834.0, 3: 3681.0}
# One SQLite instance: its 1,500-pilot burst, 0.34 ms of CPU a call (the CPU's ceiling; the
# burst itself ran at 1,517-1,726 calls/s in the morning's session of that day).
SQLITE_MEASURED = 1 / 0.00034
CALL_COSTS = {
    "pool, measured (0.71 ms)": 1 / 1416.0,
    "pool, CPU (0.51 ms)": 0.00051,
    "budget (1 ms)": 0.001,
}
# The master's bulk calls (``bench/master_calls_bench.py``, 16-core machine, 400 workers,
# docs/architectures.md): a carried completion (recorded, its output written, the task it feeds
# released) 0.63 ms; a placed pair 0.27 ms, plus about 0.1 ms for naming its successors (the
# 2-core machine's increment, the same bench).
ROW_COSTS = {"completion": 0.00063, "pair": 0.00037}
FIRST_BURST_TARGET = 60.0  # seconds
DELAY_TARGET = 1.0  # seconds, the median inter-task delay
COHORTS = 64  # the pilots' groups that :func:`poll_burst` follows


@dataclass(frozen=True)
class Scale:
    """The pool and the time constants (the event simulator's defaults, ``sim.config``).
    ``per_completion`` and ``per_pair``: what a distributed master's completion (with the task it
    releases) and pair (with its successor) cost in a bulk call; None: two rows at ``per_row``
    each, as the simulator charges them."""

    pilots: int = 150_000
    sites: int = 100
    tasks: int = 1_000_000
    runtime: float = SimConfig.runtime_mean
    runtime_sd: float = SimConfig.runtime_sd
    call_cost: float = 1 / 1416.0
    per_row: float = TqCosts.per_row
    per_completion: float | None = ROW_COSTS["completion"]
    per_pair: float | None = ROW_COSTS["pair"]
    latency: float = Network.tq_latency  # one way, pilot (or master) to Task Queue
    lan: float = Network.lan_latency
    heartbeat: float = SimConfig.heartbeat_interval
    poll_interval: float = SimConfig.poll_interval
    poll_max: float = SimConfig.poll_max
    round_window: float = SimConfig.round_window
    round_period: float = SimConfig.round_period
    round_full: float = SimConfig.round_full
    master_timeout: float = SimConfig.master_timeout
    fanout: int = Network.fanout
    decode_per_task: float = Network.decode_per_task
    files_per_task: int = 2  # an input and an output (W1)

    def __post_init__(self) -> None:
        if self.pilots < 2 * self.sites or self.sites < 1 or self.tasks < 2:
            raise UsageError("a pool needs at least one site, two pilots a site and two tasks")
        if self.call_cost <= 0 or self.per_row < 0:
            raise UsageError("the per-call cost must be positive and the per-row cost not negative")

    @classmethod
    def from_config(cls, config: SimConfig, call_cost: float | None = None) -> Scale:
        """The event simulator's run ``config`` as a scale (what the validation compares): its
        costs, every row at ``per_row``."""
        net = config.network
        return cls(
            pilots=config.pilots,
            sites=config.sites,
            tasks=config.tasks,
            runtime=config.runtime_mean,
            runtime_sd=config.runtime_sd,
            call_cost=config.costs.call if call_cost is None else call_cost,
            per_row=config.costs.per_row,
            per_completion=None,
            per_pair=None,
            latency=net.tq_latency,
            lan=net.lan_latency,
            heartbeat=config.heartbeat_interval,
            poll_interval=config.poll_interval,
            poll_max=config.poll_max,
            round_window=config.round_window,
            round_period=config.round_period,
            round_full=config.round_full,
            master_timeout=config.master_timeout,
            fanout=net.fanout,
            decode_per_task=net.decode_per_task,
        )

    def with_cost(self, call_cost: float) -> Scale:
        return replace(self, call_cost=call_cost)

    @property
    def chains(self) -> int:
        return self.tasks // 2

    @property
    def submitted_at(self) -> float:
        """When the workflow arrives: once the running pilots registered
        (``sim.engine.submit_time``)."""
        return 10.0 + 0.01 * self.pilots

    def completion_cost(self) -> float:
        return 2 * self.per_row if self.per_completion is None else self.per_completion

    def pair_cost(self) -> float:
        return 2 * self.per_row if self.per_pair is None else self.per_pair


@dataclass(frozen=True)
class Estimate:
    """One architecture at one size, cost and number of instances."""

    architecture: str
    instances: int
    call_cost: float
    calls_per_s: float  # offered load, steady state
    utilization: float  # of the pool, steady state
    requests_per_task: float  # over the whole run, as the simulator counts them
    delay_median: float  # s; inf when the pool cannot keep up
    first_burst: float  # s; inf when the pool cannot keep up
    idle_utilization: float  # of the pool before the submission (pilots polling)
    turnaround: float = math.nan  # s, the submission to the last task's end

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


def expected_max(count: float) -> float:
    """The expected maximum of ``count`` independent standard normal variables (Blom's
    approximation; 0 for one or none)."""
    if count <= 1:
        return 0.0
    return statistics.NormalDist().inv_cdf((count - 0.375) / (count + 0.25))


def waves(chains: int, workers: int) -> list[int]:
    """The chains each wave runs: ``workers`` at a time, the last wave what is left."""
    full, rest = divmod(chains, workers)
    return [workers] * full + ([rest] if rest else [])


def turnaround(scale: Scale, workers: int, delay: float, burst: float) -> float:
    """Seconds from the submission to the last task's end (module docstring)."""
    sizes = waves(scale.chains, workers)
    tasks_in_a_row = 2 * len(sizes)
    spread = scale.runtime_sd * math.sqrt(2.0) * expected_max(sizes[-1])
    return burst + tasks_in_a_row * scale.runtime + (tasks_in_a_row - 1) * delay + spread


def backoff(scale: Scale, call: float) -> tuple[int, float]:
    """The agent's back-off: how many of an idle stretch's polls come before the ceiling
    ``poll_max``, and the seconds they take (each wait plus its ``call``)."""
    polls, seconds, wait = 0, 0.0, scale.poll_interval
    while wait < scale.poll_max and polls < 1000:
        polls += 1
        seconds += wait + call
        wait *= 1.5
    return polls, seconds


def poll_burst(scale: Scale, expected: int, service: float) -> float:
    """The pulling pilots' first burst: seconds from the submission until ``expected`` pilots
    have their first task.  ``COHORTS`` groups of pilots, started evenly over two seconds,
    register and then poll with the back-off, every call a round trip and its turn at one FIFO
    server of ``service`` s a call (the instances together); a poll served after the submission
    gets a task."""
    cohorts = min(COHORTS, scale.pilots)
    size = [scale.pilots / cohorts] * cohorts
    lat = scale.latency
    at = scale.submitted_at
    # (arrival at the server, cohort, polls so far; -1: its registration)
    arrivals = [(2.0 * (c + 0.5) / cohorts + lat, c, -1) for c in range(cohorts)]
    heapq.heapify(arrivals)
    free, served = 0.0, 0.0
    ends: list[tuple[float, float]] = []  # (a served poll's last answer, pilots it started)
    while arrivals and served < expected:
        arrive, c, polls = heapq.heappop(arrivals)
        begin = max(arrive, free)
        free = begin + size[c] * service
        if polls >= 0 and free > at:
            got = size[c] * min(1.0, (free - at) / max(free - begin, 1e-12))
            served += got
            ends.append((free + lat, got))
            size[c] -= got
            if size[c] <= 1e-9:
                continue
        wait = 0.0 if polls < 0 else min(scale.poll_max, scale.poll_interval * 1.5**polls)
        heapq.heappush(arrivals, (free + 2 * lat + wait, c, polls + 1))
    counted = 0.0
    for end, got in sorted(ends):
        counted += got
        if counted >= expected - 1e-6:
            return max(0.0, end - at)
    return math.inf


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
    saturated = math.isinf(delay)
    throughput = scale.pilots / (scale.runtime + (0.0 if saturated else delay))
    idle_rate = scale.pilots / scale.poll_max + heartbeats
    # The first burst (inf when the heartbeats alone fill the pool).
    spare = 1.0 - heartbeats * scale.call_cost / k
    expected = min(scale.pilots, scale.chains)
    burst = math.inf
    if spare > 0:
        burst = poll_burst(scale, expected, scale.call_cost / k / spare)
    # The whole run's calls: the tasks' own, the heartbeats, the idle pilots' polls.
    call = 2 * scale.latency + scale.call_cost + (0.0 if saturated else wait)
    step = delay if not saturated else calls * (2 * scale.latency + scale.call_cost) + publish
    run = turnaround(scale, scale.pilots, step, 0.0 if math.isinf(burst) else burst)
    idle = max(0.0, scale.pilots * run - scale.tasks * (scale.runtime + step))
    ceiling = scale.poll_max + call
    early, early_seconds = backoff(scale, call)
    polls = idle / ceiling + scale.pilots * max(0.0, early - early_seconds / ceiling)
    beats = scale.pilots * run / (scale.heartbeat + call)
    requests = calls * scale.tasks + beats + polls
    return Estimate(
        arch,
        k,
        scale.call_cost,
        rate,
        min(1.0, rate * service / k),
        requests / scale.tasks,
        delay,
        burst,
        min(1.0, idle_rate * scale.call_cost / k),
        run,
    )


def _depth(scale: Scale) -> int:
    workers = max(2, scale.pilots // scale.sites - 1)
    return max(1, math.ceil(math.log(workers, scale.fanout)))


def _tree(scale: Scale, shown: float) -> float:
    """The TaskList's trip down the site's DHT tree (decoded at each hop) and the replies' up."""
    depth = _depth(scale)
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


@functools.lru_cache(maxsize=4096)
def batch_waits(rate: float, window: float, full: int = 0, count: int = 1000) -> tuple[float, ...]:
    """``count`` completions' waits for their round (``sched.rounds``), sorted: a Poisson stream
    of ``rate`` (a fixed seed: the model stays a function of its inputs), batched as the round
    book batches them: the round comes once no completion came for a ``window``, at most
    ``MAX_BATCH`` windows after the batch's first, or once ``full`` completions came."""
    if rate <= 0:
        return (window,)
    draw = random.Random(f"batch/{rate}/{window}")
    times = list(itertools.accumulate(draw.expovariate(rate) for _ in range(count)))
    waits: list[float] = []
    first = 0
    for index, at in enumerate(times):
        nxt = times[index + 1] if index + 1 < count else math.inf
        start = times[first]
        cap = start + MAX_BATCH * window
        due = min(at + window, cap)
        if full > 1 and index - first + 1 >= full:
            due = at
        if nxt < due:
            continue  # the batch goes on
        waits.extend(due - times[i] for i in range(first, index + 1))
        first = index + 1
    return tuple(sorted(waits))


def batch_median(rates: Any, weights: Any, window: float, full: int = 0) -> float:
    """The median wait for a round of the completions of a site whose completion rate is
    ``rates`` for a share ``weights`` of them (:func:`batch_waits`, rates rounded to 10 %)."""
    mixed: dict[int | None, float] = {}
    for rate, weight in zip(np.asarray(rates).tolist(), np.asarray(weights).tolist(), strict=True):
        if weight > 0:
            key = None if rate <= 0 else round(math.log(rate) / math.log(1.1))
            mixed[key] = mixed.get(key, 0.0) + weight
    if not mixed:
        return window
    pairs: list[tuple[float, float]] = []
    for key, weight in mixed.items():
        waits = batch_waits(0.0 if key is None else 1.1**key, window, full)
        pairs += [(wait, weight / len(waits)) for wait in waits]
    pairs.sort()
    half = 0.5 * sum(weight for _, weight in pairs)
    for wait, weight in pairs:
        half -= weight
        if half <= 0:
            return wait
    return pairs[-1][0]


def rounds_per_s(rate: np.ndarray, window: float, full: int) -> np.ndarray:
    """A site's rounds a second at a completion ``rate`` (an array): each round carries the first
    completion and those that came in its batch (:func:`batch`)."""
    positive = np.maximum(rate, 1e-12)
    quiet = np.expm1(positive * window) / positive
    waited = np.minimum(MAX_BATCH * window, np.maximum(window, quiet))
    if full > 1:
        waited = np.minimum(waited, (full - 1) / positive)
    result: np.ndarray = rate / (1.0 + rate * waited)
    return result


def completion_rate(scale: Scale, workers: int, delay: float, burst: float) -> tuple[Any, Any]:
    """(times, completions a second at one site that free a worker for another task): the
    waves' task ends, each a normal spread.  A worker's last completion places nothing: it
    makes no round, it rides the master's next ``sync``."""
    sizes = waves(scale.chains, workers)
    sd = scale.runtime_sd
    end = turnaround(scale, workers, delay, burst) + 4 * sd * math.sqrt(2 * len(sizes))
    step = min(sd / 8 if sd > 0 else 1.0, 1.0)
    times = np.arange(0.0, end + step, step)
    rate = np.zeros_like(times)
    for wave, chains in enumerate(sizes):
        start = burst + wave * 2 * (scale.runtime + delay)
        after = sizes[wave + 1] if wave + 1 < len(sizes) else 0
        for task, freed in ((1, chains), (2, after)):  # the step-1 ends that take a next chain
            mean = start + task * scale.runtime + (task - 1) * delay
            spread = max(sd * math.sqrt(2 * wave + task), 1e-3)
            z = (times - mean) / spread
            rate += freed / scale.sites * np.exp(-0.5 * z * z) / (spread * math.sqrt(2 * math.pi))
    return times, rate


def _distributed(scale: Scale, k: int, costs: CostModel) -> Estimate:
    sites = scale.sites
    workers = scale.pilots - sites
    per_site = workers / sites
    full = full_batch(per_site, scale.round_full)
    heartbeat = max(0.5, scale.master_timeout / 3)
    hops = max(1, math.ceil(math.log2(max(2, scale.pilots // scale.sites))))
    publish = scale.files_per_task * 2 * (hops + 1) * scale.lan + scale.lan
    rate = service = 0.0
    delay = 2 * scale.round_window
    gathered = scale.round_window
    assign = 0.0
    for _ in range(100):
        throughput = workers / (scale.runtime + delay)
        completions = throughput / sites  # a second, at one site
        gathered = batch(completions, scale.round_window, full)
        rounds = float(rounds_per_s(np.array([completions]), scale.round_window, full)[0])
        done = completions / rounds  # completions a round carries
        offers = min(MAX_WANT, WANT_PER_IDLE * max(1.0, done))
        # the round's assign: its completions and their released tasks, its pairs and their
        # successors (``sim.taskqueue.assign``'s rows)
        assign = scale.call_cost + done * (scale.completion_cost() + scale.pair_cost())
        pairs = done * reply_limit(max(1, round(done)), _reply_budget())
        work = (
            _tree(scale, offers)
            + costs.rank_time(int(offers))
            + costs.assign_time(int(pairs))
            + scale.lan
        )
        rate_guess = rate
        wait = 0.0 if rate_guess <= 0 else mean_wait(k, rate_guess, service)
        if math.isinf(wait):
            delay = math.inf
            break
        round_time = 2 * scale.latency + wait + assign + work
        syncs = 1.0 / heartbeat
        rate = sites * (rounds + syncs)
        busy = sites * (rounds * assign + syncs * scale.call_cost)
        service = busy / rate
        if busy >= k:
            delay = math.inf
            break
        new_delay = publish + gathered + round_time
        if abs(new_delay - delay) < 1e-9 and rate_guess == rate:
            delay = new_delay
            break
        delay = new_delay
    saturated = math.isinf(delay)
    throughput = workers / (scale.runtime + (0.0 if saturated else delay))
    idle_load = sites / heartbeat * scale.call_cost / k
    burst = _distributed_burst(scale, k, costs, idle_load)
    step = delay if not saturated else 2 * scale.round_window
    begun = 0.0 if math.isinf(burst) else burst
    run, ran, waited = _whole_run(scale, workers, step, begun, full)
    # The median delay: the completions' waits at their sites' rate when they come (the waves'),
    # then the round, its assign and the hand-out, as in steady state.
    median = delay if saturated else delay - gathered + waited
    calls = sites * (ran + len(_burst_rounds(scale)) + 1 + run / heartbeat)
    return Estimate(
        "distributed",
        k,
        scale.call_cost,
        rate,
        min(1.0, rate * service / k),
        calls / scale.tasks,
        median,
        burst,
        min(1.0, idle_load),
        run,
    )


def _whole_run(
    scale: Scale, workers: int, delay: float, burst: float, full: int
) -> tuple[float, float, float]:
    """A distributed run from the submission on: its turnaround, each site's rounds (the
    completions that free a worker, batched at their rate when they come) and the median wait
    of those completions for their round."""
    run = turnaround(scale, workers, delay, burst)
    times, per_site_rate = completion_rate(scale, workers, delay, burst)
    spacing = float(times[1] - times[0]) if len(times) > 1 else 1.0
    rounds = float(np.sum(rounds_per_s(per_site_rate, scale.round_window, full))) * spacing
    waited = batch_median(per_site_rate, per_site_rate, scale.round_window, full)
    return run, rounds, waited


def _reply_budget() -> int:
    from glidein_ext.distributed.master_state import REPLY_BUDGET

    return REPLY_BUDGET


def _burst_rounds(scale: Scale) -> list[tuple[float, float, float, bool]]:
    """The first burst's rounds at one site: (idle workers, TaskList entries, pairs placed,
    whether the round ``sync``s first).  The first round shows the long poll's offers (at most
    ``MAX_WANT``, ``WANT_PER_IDLE`` per idle worker); each later round the last sync's offers no
    round placed, but the other sites' shares (``sched.stock.spares``, ``sched.offers``), or
    fresh offers when fewer are left than idle workers.  A round places at most the TaskList's
    first window (``sched.ranking``: the workers' best ranks fall in it) unless the workers'
    reply ``limit`` reaches past it."""
    idle = (scale.pilots - scale.sites) / scale.sites
    available = float(scale.chains)  # the step-0 tasks, runnable at the submission
    spares = 0.0
    found: list[tuple[float, float, float, bool]] = []
    while idle >= 1 and available >= 1 and len(found) < 1000:
        synced = not found or spares < idle
        if synced:
            offered = min(MAX_WANT, WANT_PER_IDLE * idle, available)
            entries = offered
            spares = min(offered, available / scale.sites)  # this site's share of them
        else:
            entries = spares
        window = math.ceil(entries / WANT_PER_IDLE)
        limit = reply_limit(max(1, round(idle)), _reply_budget())
        reach = window if limit <= window else min(entries, window * math.ceil(limit / window))
        placed = max(1.0, min(idle, reach))
        found.append((idle, entries, placed, synced))
        idle -= placed
        available -= placed
        spares = max(0.0, spares - placed)
    return found


def _distributed_burst(scale: Scale, k: int, costs: CostModel, idle_load: float) -> float:
    """Each master's long poll answers at the submission, the sites' ``sync``s served in turn;
    then its rounds until every idle worker has a task, the first two at once, the later ones
    after a quiet ``round_window`` (module docstring); at least every site's calls of the burst
    served one after the other."""
    if idle_load >= 1:
        return math.inf
    rounds = _burst_rounds(scale)
    if not rounds:
        return 0.0
    slower = 1 / (1 - idle_load)
    burst = scale.latency + scale.lan
    served = 0.0  # one site's calls' service: every site's, in turn, bounds the burst below
    for number, (idle, entries, placed, synced) in enumerate(rounds):
        if synced:  # every site's sync, served in turn
            sync = scale.call_cost + scale.per_row * entries
            served += sync
            burst += scale.sites * sync / k * slower + (0.0 if number == 0 else 2 * scale.latency)
        limit = reply_limit(max(1, round(idle)), _reply_budget())
        assign = scale.call_cost + scale.pair_cost() * placed
        served += assign
        burst += (
            (scale.round_window if number >= 2 else 0.0)
            + _tree(scale, entries)
            + costs.rank_time(int(entries))
            + costs.assign_time(int(idle * limit))
            + 2 * scale.latency
            + assign * slower
        )
    return max(burst, 2 * scale.latency + scale.lan + scale.sites * served / k * slower)


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
