"""A round's rankings for every idle worker of a simulated site: the answer of each worker's
real ``sched.ranking.Ranker.rank`` (Delgado Peris 2014 §III.C: each worker ranks the TaskList by
its cached inputs), found without scoring every TaskList entry for every worker.

In the simulator one ClassAd verdict holds for every entry of a TaskList (the tasks share one
MatchSpec; the verdict itself is still the worker's ``Ranker.verdict``), so an entry's rank is
its locality plus one constant: the entries that read none of the worker's cached files all rank
the same, and ``Ranker.rank`` orders them by TaskList window, then by the worker's tie shuffle
(``sched.ranking.tie_order``), then position.  With a reply ``limit`` smaller than the TaskList,
the best ``limit`` are among the entries with a cached input (scored as the Ranker scores them)
and the first entries of that order, found window by window with the tie shuffle computed for a
whole window at once (numpy, 64-bit arithmetic modulo 2**64 as ``tie_order``'s mask).  Anything
else (several specs, no limit, a spec that does not match or fit) goes to ``Ranker.rank``;
``tests/unit/sim`` checks the two agree.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence, Set

import numpy as np

from glidein_ext.sched.ranking import (
    TASKS_PER_IDLE,
    Ranker,
    Ranking,
    TaskEntry,
    WorkerState,
    squash,
    tie_order,
)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX = np.uint64(0x94D049BB133111EB)
_SEED = 0xBF58476D1CE4E5B9
_MASK = (1 << 64) - 1


def tie_orders(positions: np.ndarray, seed: int) -> np.ndarray:
    """``sched.ranking.tie_order`` of every position (uint64), for one ``seed``."""
    salt = np.uint64(((seed + 1) * _SEED) & _MASK)
    mixed = positions * _GOLDEN + salt
    mixed = (mixed ^ (mixed >> np.uint64(31))) * _MIX
    return mixed ^ (mixed >> np.uint64(29))


class RoundRanks:
    """One TaskList (the entries shown at their positions), ranked for one worker after
    another."""

    def __init__(self, shown: Sequence[TaskEntry]) -> None:
        self.shown = shown
        self.size = len(shown)
        self.window = max(1, -(-self.size // TASKS_PER_IDLE))
        first = shown[0].spec if shown else None
        self.uniform = first is not None and all(entry.spec == first for entry in shown)
        self.spec = first
        self._readers: dict[str, list[int]] = {}
        for position, entry in enumerate(shown):
            for item in entry.inputs:
                self._readers.setdefault(item.lfn, []).append(position)
        self._positions: list[np.ndarray] = []
        self._positioned: list[TaskEntry] | None = None

    def _window(self, index: int) -> np.ndarray:
        while len(self._positions) <= index:
            start = len(self._positions) * self.window
            stop = min(self.size, start + self.window)
            self._positions.append(np.arange(start, stop, dtype=np.uint64))
        return self._positions[index]

    def positioned(self) -> list[TaskEntry]:
        """The entries as the worker sees them: task ids are TaskList positions."""
        if self._positioned is None:
            self._positioned = [TaskEntry(i, e.spec, e.inputs) for i, e in enumerate(self.shown)]
        return self._positioned

    def rank(self, ranker: Ranker, state: WorkerState, limit: int, spread: int) -> Ranking:
        """``ranker.rank(self.positioned(), state, limit=limit, spread=spread)``."""
        spec = self.spec
        if not self.uniform or spec is None or limit >= self.size or limit < 1:
            return ranker.rank(self.positioned(), state, limit=limit, spread=spread)
        if not ranker.fits(spec, state):
            return Ranking({}, 0)
        verdict = ranker.verdict(spec)
        if not verdict.matched:
            return Ranking({}, 0)
        worker_rank, task_rank = squash(verdict.worker_rank), squash(verdict.task_rank)
        hits = self._hits(state.cached, state.host_cached)
        scored: list[tuple[float, int, int, int, int]] = []
        window = self.window
        for position in sorted(hits):
            value = ranker.locality(self.shown[position].inputs, state) + worker_rank + task_rank
            tie = tie_order(position, spread)
            scored.append((-value, position // window, tie, position, position))
        plain = -(ranker.locality((), state) + worker_rank + task_rank)
        found = 0
        index = 0
        while found < limit and index * window < self.size:
            positions = self._window(index)
            ties = tie_orders(positions, spread)
            keep = np.ones(len(positions), dtype=bool)
            for position in hits:
                if position // window == index:
                    keep[position - index * window] = False
            kept = np.flatnonzero(keep)
            if len(kept) > limit:
                bound = np.partition(ties[kept], limit - 1)[limit - 1]
                kept = kept[ties[kept] <= bound]  # ties equal to the bound are all kept
            for offset in kept.tolist():
                position = index * window + offset
                scored.append((plain, index, int(ties[offset]), position, position))
            found += len(kept)
            index += 1
        best = heapq.nsmallest(limit, scored)
        return Ranking({task_id: -negative for negative, *_, task_id in best}, self.size)

    def _hits(self, cached: Set[str], host_cached: Set[str]) -> set[int]:
        """The positions of the entries that read a file of the worker's or its host's cache."""
        found: set[int] = set()
        readers = self._readers
        for files in (cached, host_cached):
            if len(files) < len(readers):
                for lfn in files:
                    found.update(readers.get(lfn, ()))
            else:
                for lfn, positions in readers.items():
                    if lfn in files:
                        found.update(positions)
        return found
