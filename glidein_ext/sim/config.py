"""What one simulated run is: the architecture, the workload, the pilots, and the time models.

Every duration the simulator does not take from the real cores is here, with where its default
comes from.  Delgado Peris 2014 §IV (HPCS): two sites, tasks
of 3.3 minutes on average, a 20 s TaskList period.  Hasham 2011 (IEEE
TNS 2011) section V: 120 pilots, 700 MB files, the SE's delay factor and failure rate (Table I),
three submission mechanisms, cache schemes C1/C2/C3.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from glidein_ext.cache.se import SE_CONDITIONS, SeCondition
from glidein_ext.errors import UsageError
from glidein_ext.sched.assign import DEFAULT_METHOD, METHODS
from glidein_ext.sched.rounds import FULL_FRACTION
from glidein_ext.site.victims import POLICY_NAMES

ARCHITECTURES = ("pre-dht", "centralized", "distributed")
SUBMISSIONS = ("running", "monitor", "direct")
WORKFLOWS = ("w1", "w2", "w3")
TQ_COSTS = ("grouped", "per-task")
VICTIM_POLICIES = POLICY_NAMES  # site.victims.ORDERS
MB = 1_000_000
GB = 1_000_000_000

# Hasham 2011 Table I, plus d3f1 (the text's "highest delay, low failure rate": d3 with f1).
CONDITIONS: dict[str, SeCondition] = {**SE_CONDITIONS, "d3f1": SeCondition(0.50, 0.0)}


@dataclass(frozen=True)
class CacheScheme:
    """Hasham 2011 §V: C1 cache-per-host, C2 single-pilot-cache (both with waitForData), C3
    cache-per-host without waitForData; ``none``: no cache (every read from the SE)."""

    name: str
    enabled: bool
    per_host: bool
    wait_for_data: bool


SCHEMES: dict[str, CacheScheme] = {
    "C1": CacheScheme("C1", True, True, True),
    "C2": CacheScheme("C2", True, False, True),
    "C3": CacheScheme("C3", True, True, False),
    "none": CacheScheme("none", False, False, False),
}


@dataclass(frozen=True)
class Storage:
    """The SE: every get and put waits ``delay_factor * time_scale * max(0, N(1, 0.25))`` s and
    then fails with ``failure_rate`` (the reading of ``glidein_ext.cache.se``), plus the
    transfer at ``bandwidth``.  ``time_scale``: seconds per unit of delay factor."""

    delay_factor: float = 0.01
    failure_rate: float = 0.0
    time_scale: float = 600.0
    bandwidth: float = 100 * MB  # bytes per second

    @classmethod
    def condition(cls, name: str, time_scale: float = 600.0) -> Storage:
        try:
            found = CONDITIONS[name]
        except KeyError:
            raise UsageError(f"unknown SE condition {name!r} ({', '.join(CONDITIONS)})") from None
        return cls(found.delay_factor, found.failure_rate, time_scale)


@dataclass(frozen=True)
class Network:
    """Latencies and bandwidths (seconds, bytes per second)."""

    tq_latency: float = 0.025  # one way, pilot to Task Queue (a WAN)
    lan_latency: float = 0.0005  # one way, one message between pilots of a site
    peer_bandwidth: float = 100 * MB  # a peer's file server
    disk_bandwidth: float = 400 * MB  # reading an input from the local cache
    fanout: int = 8  # the DHT broadcast's regions per hop (Delgado Peris 2014 §III.B)
    # Decoding a TaskList at each hop: about 17 ms for 3,000 tasks (bench/round_bench.py).
    decode_per_task: float = 5.7e-6


@dataclass(frozen=True)
class Grid:
    """Latencies of the batch and grid systems (Hasham 2011 §V, figure 7)."""

    batch_queue: float = 120.0  # mean wait of a pilot in its site's batch queue
    submit_latency: float = 300.0  # mean gLite scheduling latency of a direct job
    notify_latency: float = 180.0  # mean gLite delay to notice a direct job's end
    monitor_interval: float = 60.0  # the PilotMonitor's pass


@dataclass(frozen=True)
class TqCosts:
    """The Task Queue's service time per request: ``call`` for every request (HTTP, one
    transaction: about 340 serialised calls a second, the 1,500-pilot burst of
    ``bench/tq_bench.py`` when the simulator was written; the same bench measures 0.31-0.34 ms of
    CPU a call on the 16-core machine today, docs/tq.md: kept at 3 ms so that the experiments'
    results stay comparable across versions; ``sim.gridscale.CALL_COSTS`` carries today's),
    ``per_row`` per row a bulk call reads or writes (a submit takes about 0.1 s per
    1,000 tasks), plus the matcher's cost from ``sim.calibration`` for each request that
    matches."""

    call: float = 0.003
    per_row: float = 0.0001


@dataclass(frozen=True)
class SimConfig:
    """One run."""

    architecture: str = "pre-dht"
    workflow: str = "w1"
    tasks: int = 160  # about: the generator's counts are rounded
    pilots: int = 120
    sites: int = 1
    pilots_per_host: int = 1
    runtime_mean: float = 198.0  # Delgado Peris 2014: 3.3 minutes on average
    runtime_sd: float = 20.0
    file_size: int = 100 * MB
    scheme: str = "C1"
    submission: str = "running"
    wait_for_data: float = 60.0  # the Task Queue's default bound
    heartbeat_interval: float = 30.0
    poll_interval: float = 1.0
    poll_max: float = 10.0
    round_window: float = 0.2
    round_period: float = 2.0
    # A batch is full (its round starts at once) when completions freed this fraction of the
    # site's workers (the product's, ``sched.rounds``); 0: rounds by the window alone, as the
    # paper's master with its fixed TaskList period.
    round_full: float = FULL_FRACTION
    # A round whose offers the master already holds (the successors the Task Queue named, a
    # fresh sync's leftovers: ``sched.stock``) makes no sync, its assign carrying the
    # completions; False: every round syncs, as the paper's master fetches its TaskList.
    round_stock: bool = True
    long_poll: bool = True  # a dry site's sync waits at the Task Queue for work
    master_timeout: float = 60.0  # the Task Queue's default (``tq serve --master-timeout``)
    assignment: str = DEFAULT_METHOD
    # "product": as the product's master (``sched.rounds``: a completion rides the sync of the
    # round it triggers, no call of its own); "batched" also skips the heartbeat and the
    # dead/release calls while a round is due within one window.  (What the Task Queue offers
    # the master is the product's own ``sched.offers``: no option.)
    master_calls: str = "product"
    tq_cost: str = (
        "grouped"  # "per-task": every queued task evaluated per request (Delgado Peris 2014's TQ)
    )
    max_retries: int = 10
    # Sfiligoi 2013: ``vacate_at`` s after the submission the site takes ``vacate_cpus`` CPUs back
    # (0: never); the real victim choice (``site.victims``) under ``victim_policy``.
    vacate_at: float = 0.0
    vacate_cpus: int = 0
    victim_policy: str = "completion"
    cache_max_space: int = 10 * GB
    cache_min_threshold: int = 1 * GB
    seed: int = 0
    horizon: float = 30 * 86400.0
    storage: Storage = field(default_factory=Storage)
    network: Network = field(default_factory=Network)
    grid: Grid = field(default_factory=Grid)
    costs: TqCosts = field(default_factory=TqCosts)

    def __post_init__(self) -> None:
        checks = (
            (self.architecture, ARCHITECTURES, "architecture"),
            (self.workflow, WORKFLOWS, "workflow"),
            (self.submission, SUBMISSIONS, "submission"),
            (self.scheme, tuple(SCHEMES), "cache scheme"),
            (self.tq_cost, TQ_COSTS, "tq cost"),
            (self.assignment, tuple(METHODS), "assignment"),
            (self.master_calls, ("product", "batched"), "master calls"),
            (self.victim_policy, VICTIM_POLICIES, "victim policy"),
        )
        for value, allowed, what in checks:
            if value not in allowed:
                raise UsageError(f"unknown {what} {value!r} (choose from {', '.join(allowed)})")
        if self.pilots < 1 or self.sites < 1 or self.pilots_per_host < 1 or self.tasks < 2:
            raise UsageError("a run needs at least one pilot, site and host, and two tasks")
        if self.architecture == "distributed" and self.pilots < 2 * self.sites:
            raise UsageError("a distributed site needs a master and at least one worker")
        if not 0.0 <= self.round_full <= 1.0:
            raise UsageError(f"round_full must be in [0, 1], not {self.round_full}")
        if self.vacate_cpus < 0 or self.vacate_at < 0:
            raise UsageError("vacate_at and vacate_cpus must be 0 or more")
        if self.vacate_cpus and (
            self.architecture == "distributed" or self.submission != "running"
        ):
            raise UsageError("a vacate is simulated on already-running pulling pilots")

    @property
    def cache(self) -> CacheScheme:
        return SCHEMES[self.scheme]

    def replace(self, **changes: object) -> SimConfig:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def scale(self) -> float:
        """The generator's ``scale`` for about ``tasks`` tasks (W1: 160 at 1, W2/W3: 120)."""
        return self.tasks / (160.0 if self.workflow == "w1" else 120.0)
