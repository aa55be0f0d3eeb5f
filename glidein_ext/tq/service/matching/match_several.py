"""The candidates of one take in a pool of Task Queue instances (Lee 2003 §4.2: another instance
may be taking the first): the ``count`` best tasks for a pilot, in the order repeated choices
would give them (each removing its pick), found in one pass.  Pure: the matcher hands in what it
knows (``Matcher.choose_several``).

Repeated choices take the locality hits first, best first; then the groups as the matcher ranks
them (the pilot's Rank of the group, the group's Rank of the pilot, then the group's first task
left: a held one stays first, only a pick leaves the group), each giving its first task that is
neither held nor picked.  Here the groups come ranked once; a group whose first task was picked
goes back into a heap under its next one.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator, Sequence

# (hits, the pilot's Rank, the task's Rank, priority, -task id): a locality hit, larger first
Scored = tuple[int, float, float, int, int]
# (order, group key, the pilot's Rank, the task's Rank), smaller order first (``match_batches``)
Ranked = tuple[tuple[float, float, int, int], str, float, float]
Pick = tuple[int, int, float, float]  # task id, hits, the pilot's Rank, the task's Rank


def several(
    scored: list[Scored],
    groups: Iterator[Ranked],
    order_of: Callable[[str], Sequence[tuple[int, int]]],
    held: Callable[[int], bool],
    count: int,
) -> list[Pick] | None:
    """The picks, best first; None where a Rank is NaN (no order: choose one by one)."""
    if any(math.isnan(score[1]) or math.isnan(score[2]) for score in scored):
        return None
    chosen = [(-s[4], s[0], s[1], s[2]) for s in sorted(scored, reverse=True)[:count]]
    taken = {pick[0] for pick in chosen}
    heap: list[Ranked] = []

    def push(key: str, pilot_rank: float, task_rank: float) -> None:
        for neg_priority, task_id in order_of(key):
            if task_id not in taken:
                order = (-pilot_rank, -task_rank, neg_priority, task_id)
                heapq.heappush(heap, (order, key, pilot_rank, task_rank))
                return

    upcoming = next(groups, None) if len(chosen) < count else None
    while len(chosen) < count:
        # a group's ranked order is its first task's: a bound on it once one is picked
        while upcoming is not None and (not heap or upcoming[0] <= heap[0][0]):
            _, key, pilot_rank, task_rank = upcoming
            if math.isnan(pilot_rank) or math.isnan(task_rank):
                return None
            push(key, pilot_rank, task_rank)
            upcoming = next(groups, None)
        if not heap:
            break
        _, key, pilot_rank, task_rank = heapq.heappop(heap)
        for _, task_id in order_of(key):
            if task_id not in taken and not held(task_id):
                chosen.append((task_id, 0, pilot_rank, task_rank))
                taken.add(task_id)
                push(key, pilot_rank, task_rank)
                break
    return chosen
