"""How a worker ranks the master's TaskList (Delgado Peris 2014 §III.C), pure.

For each task of the TaskList the worker decides whether it may run it and how much it wants it:

- **Filter.** The task's RequestCpus/RequestMemory/RequestDisk within the worker's Cpus/Memory/Disk,
  its MaxRunTime within the worker's remaining life (no task outlives its pilot), and HTCondor's
  match: the task's Requirements true against the worker's ad and the worker's Requirements true
  against the task's ad (both ways, classad2 through :mod:`glidein_ext.classads`).
- **Rank** (higher is better), for an allowed task::

      rank = files * (own_files + host * host_files)
           + bytes * (own_bytes + host * host_bytes) / input_bytes
           + squash(worker's Rank of the task) + squash(task's Rank of the worker)

  ``own_*``: the task's inputs already in this worker's cache (count, bytes); ``host_*``: those not
  in it but in a cache of another pilot on the same host (a hard link away);
  ``input_bytes``: all the task's inputs (the bytes term is 0 when they are all empty);
  ``squash(x) = x / (1 + |x|)`` maps a ClassAd Rank into (-1, 1), keeping its order.
  With the default weights (files 8, bytes 8, host 0.5) one input held on the host adds at least 4,
  more than the two squashed Ranks can differ, so data-aware choices win: a task with any input
  held locally outranks every task with none, whatever the Ranks; the Ranks order tasks of equal
  locality.  Locality is counted in files as well as bytes because every fetch has a latency of
  its own, and absolutely (not as a fraction) because the master maximises the sum of ranks, i.e.
  the number of inputs read locally over the whole site.

ClassAd evaluation is the costly part (tens of thousands of pairs per second), so tasks with equal
:class:`TaskSpec` form a group evaluated once per worker (as the Task Queue's matcher groups by
MatchSpec), and a :class:`Ranker` keeps its verdicts for later rounds.  The ads are built as the
Task Queue's matcher builds them, so a worker decides what the Task Queue would.  When every
Requirements is ``true`` and every Rank a number, classad2 is not needed at all (a worker node's
bare Python); otherwise its absence is a :class:`~glidein_ext.errors.MissingDependencyError`.

The worker's answer may be truncated to its best ``limit`` tasks (:meth:`Ranker.rank`): with
``limit`` at least the number of pilots in the round, the master's assignment is the same as with
every rank (:mod:`glidein_ext.sched.lap`, fact 1); below it, the master is told when it would need
more (:attr:`glidein_ext.sched.assign.Matching.needs_more`).
"""

from __future__ import annotations

import heapq
import importlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any, Protocol, Union

from glidein_ext.errors import MissingDependencyError

Scalar = Union[bool, int, float, str]

_TRUE = re.compile(r"^\s*true\s*$", re.IGNORECASE)
_NUMBER = re.compile(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$")


@dataclass(frozen=True)
class TaskSpec:
    """What a task asks of a worker: the Task Queue's MatchSpec (equal specs rank alike)."""

    requirements: str = "true"
    rank: str = "0"
    request_cpus: int = 1
    request_memory: int = 0  # MB
    request_disk: int = 0  # MB
    max_runtime: float = 3600.0  # seconds
    attributes: tuple[tuple[str, Scalar], ...] = ()


class MatchFields(Protocol):
    """The match fields of a Task Queue record (its MatchSpec, or the offer a master got): read
    here by name, so the glidein side needs none of the Task Queue's modules."""

    @property
    def requirements(self) -> str: ...
    @property
    def rank(self) -> str: ...
    @property
    def request_cpus(self) -> int: ...
    @property
    def request_memory(self) -> int: ...
    @property
    def request_disk(self) -> int: ...
    @property
    def max_runtime(self) -> int: ...


def task_spec(source: MatchFields, attributes: tuple[tuple[str, Scalar], ...]) -> TaskSpec:
    """The TaskSpec of a Task Queue task, from its record's match fields (its MatchSpec, or the
    offer a master got) and ``attributes``."""
    return TaskSpec(
        source.requirements,
        source.rank,
        source.request_cpus,
        source.request_memory,
        source.request_disk,
        float(source.max_runtime),
        attributes,
    )


@dataclass(frozen=True)
class InputFile:
    """One input of a task: its LFN and size in bytes."""

    lfn: str
    size: int = 0


@dataclass(frozen=True)
class TaskEntry:
    """One task of the master's TaskList."""

    task_id: int
    spec: TaskSpec = TaskSpec()
    inputs: tuple[InputFile, ...] = ()


@dataclass(frozen=True)
class WorkerAd:
    """What the worker offers: its ad (Site, Host, SE ... in ``attributes``), resources, policy."""

    attributes: Mapping[str, Scalar] = field(default_factory=dict)
    cpus: int = 1
    memory: int = 0  # MB
    disk: int = 0  # MB
    requirements: str = "true"
    rank: str = "0"


@dataclass(frozen=True)
class WorkerState:
    """What changes between rounds: remaining life (seconds) and the caches' contents (LFNs)."""

    remaining: float = math.inf
    cached: Set[str] = frozenset()
    host_cached: Set[str] = frozenset()  # in the caches of the other pilots of this host


@dataclass(frozen=True)
class RankWeights:
    """The weights of the rank formula (module docstring)."""

    files: float = 8.0
    bytes: float = 8.0
    host: float = 0.5


@dataclass(frozen=True)
class Verdict:
    """One group's ClassAd answer for this worker: matched (both ways), and the two Ranks."""

    matched: bool
    worker_rank: float = 0.0
    task_rank: float = 0.0


@dataclass(frozen=True)
class Ranking:
    """A worker's reply: {task id: rank}, best first, and how many tasks it may run in all."""

    ranks: dict[int, float]
    allowed: int

    @property
    def truncated(self) -> bool:
        """True when only the best ``len(ranks)`` of ``allowed`` tasks were kept."""
        return self.allowed > len(self.ranks)


def squash(value: float) -> float:
    """A ClassAd Rank mapped into (-1, 1), order kept."""
    return value / (1.0 + abs(value))


def _constant_rank(text: str) -> float | None:
    return float(text) if _NUMBER.match(text) else None


_MASK = (1 << 64) - 1


# A master asks for this many tasks per idle worker (``sched.rounds.WANT_PER_IDLE``): the first
# quarter of a TaskList is about as many tasks as there are workers to take them.
TASKS_PER_IDLE = 4


def tie_order(position: int, seed: int) -> int:
    """A deterministic shuffle of TaskList positions, a different one per ``seed`` (per worker):
    a splitmix64 finaliser of (position, seed)."""
    mixed = (position * 0x9E3779B97F4A7C15 + (seed + 1) * 0xBF58476D1CE4E5B9) & _MASK
    mixed = ((mixed ^ (mixed >> 31)) * 0x94D049BB133111EB) & _MASK
    return mixed ^ (mixed >> 29)


class Ranker:
    """Filters and ranks TaskLists for one worker, evaluating ClassAds once per task group."""

    def __init__(self, worker: WorkerAd, weights: RankWeights = RankWeights()) -> None:
        self.worker = worker
        self.weights = weights
        self.evaluations = 0  # classad2 group evaluations (tests, benchmarks)
        self._verdicts: dict[TaskSpec, Verdict] = {}
        self._worker_ad: Any = None

    def fits(self, spec: TaskSpec, state: WorkerState) -> bool:
        """Resources and life: the task fits in this worker now."""
        worker = self.worker
        return (
            spec.request_cpus <= worker.cpus
            and spec.request_memory <= worker.memory
            and spec.request_disk <= worker.disk
            and spec.max_runtime <= state.remaining
        )

    def verdict(self, spec: TaskSpec) -> Verdict:
        """Requirements both ways and both Ranks for one group (cached for this worker)."""
        found = self._verdicts.get(spec)
        if found is None:
            found = self._verdicts[spec] = self._evaluate(spec)
        return found

    def _evaluate(self, spec: TaskSpec) -> Verdict:
        worker = self.worker
        worker_rank = _constant_rank(worker.rank)
        task_rank = _constant_rank(spec.rank)
        trivial = _TRUE.match(worker.requirements) and _TRUE.match(spec.requirements)
        if trivial and worker_rank is not None and task_rank is not None:
            return Verdict(True, worker_rank, task_rank)
        classads = _classads()
        if self._worker_ad is None:
            attrs: dict[str, Scalar] = dict(worker.attributes)
            attrs.update(Cpus=worker.cpus, Memory=worker.memory, Disk=worker.disk)
            self._worker_ad = classads.make_ad(
                attrs, {"Requirements": worker.requirements, "Rank": worker.rank}
            )
        attrs = dict(spec.attributes)
        attrs.update(
            RequestCpus=spec.request_cpus,
            RequestMemory=spec.request_memory,
            RequestDisk=spec.request_disk,
            MaxRunTime=spec.max_runtime,
        )
        task_ad = classads.make_ad(attrs, {"Requirements": spec.requirements, "Rank": spec.rank})
        self.evaluations += 1
        if not classads.symmetric_match(task_ad, self._worker_ad):
            return Verdict(False)
        return Verdict(
            True, classads.rank(self._worker_ad, task_ad), classads.rank(task_ad, self._worker_ad)
        )

    def locality(self, inputs: Iterable[InputFile], state: WorkerState) -> float:
        """The locality part of the rank (module docstring)."""
        weights = self.weights
        own_files = host_files = 0
        own_bytes = host_bytes = total = 0
        for item in inputs:
            total += item.size
            if item.lfn in state.cached:
                own_files += 1
                own_bytes += item.size
            elif item.lfn in state.host_cached:
                host_files += 1
                host_bytes += item.size
        score = weights.files * (own_files + weights.host * host_files)
        if total > 0:
            score += weights.bytes * (own_bytes + weights.host * host_bytes) / total
        return score

    def rank(
        self,
        tasks: Sequence[TaskEntry],
        state: WorkerState,
        limit: int | None = None,
        spread: int | None = None,
    ) -> Ranking:
        """This worker's reply to a TaskList: every task it may run with its rank, or its best
        ``limit``.  Equal ranks are kept in TaskList order (the order the greedy assignment
        breaks ties in), or, with ``spread`` (e.g. the pilot's id), in an order shuffled per
        worker within each window of ``len(tasks) / TASKS_PER_IDLE`` positions, which spreads
        equally good tasks over the pilots (better for the optimal method with a small
        ``limit``) while the earlier windows, offered first, come first: with a small ``limit``
        the workers' best ranks cover the oldest tasks, which the master's assignment takes
        first of equal ranks (``sched.matrix.in_order``), not tasks from all over the queue
        (the newest are often a busy worker's successors, better left to it)."""
        groups: dict[TaskSpec, Verdict | None] = {}
        # (-rank, window, tie, position, task id): equal ranks by window of the TaskList (the
        # earlier, offered first, before the later), then shuffled per worker within one
        window = max(1, -(-len(tasks) // TASKS_PER_IDLE))
        scored: list[tuple[float, int, int, int, int]] = []
        for position, task in enumerate(tasks):
            spec = task.spec
            if spec in groups:
                verdict = groups[spec]
            else:
                verdict = self.verdict(spec) if self.fits(spec, state) else None
                if verdict is not None and not verdict.matched:
                    verdict = None
                groups[spec] = verdict
            if verdict is None:
                continue
            value = (
                self.locality(task.inputs, state)
                + squash(verdict.worker_rank)
                + squash(verdict.task_rank)
            )
            tie = position if spread is None else tie_order(position, spread)
            scored.append((-value, position // window, tie, position, task.task_id))
        allowed = len(scored)
        if limit is not None and limit < allowed:
            best = heapq.nsmallest(max(limit, 0), scored)
        else:
            best = sorted(scored)
        return Ranking({task_id: -negative for negative, *_, task_id in best}, allowed)


def _classads() -> Any:
    """glidein_ext.classads, imported on first need (classad2 is optional on a worker node)."""
    try:
        classads = importlib.import_module("glidein_ext.classads")
    except ImportError as exc:
        raise MissingDependencyError(
            "ranking tasks with ClassAd Requirements or Rank expressions needs classad2"
        ) from exc
    return classads
