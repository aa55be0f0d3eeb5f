"""The simulated Task Queue's queued tasks none of whose inputs was made, indexed by share, pure.

``sched.offers.choose_offers`` reads every queued task for each sync of a distributed site's
master.  At the CMS pool's size (100 sites, a million tasks) most of the queue is first steps
whose inputs are on the SE only: no site holds any of them, so what a site is offered of them
follows from their ids alone (``sched.offers.Unheld``).  This index hands ``choose_offers`` the
oldest ``keep`` of a site's share and the newest ``keep`` of the others' instead, with the same
offers; the tasks with a made input still go through ``choose_offers``'s pass.

A queued task's inputs all exist (it is queued when the last is made) and none is made again
while it waits, so whether it has a made input is decided once, when it is queued.  Every
simulated task is of one group (every pilot matches every task) and priority 0.
"""

from __future__ import annotations

import bisect

from glidein_ext.sched.offers import share_index


class UnheldTasks:
    """``sched.offers.Unheld`` for the simulator: the ids in order, and by share for the
    number of sites the last choice had (indexed again when that number changes)."""

    group = 0  # the simulated tasks' one group (``sim.taskqueue``)

    def __init__(self) -> None:
        self._ids: list[int] = []
        self._shares = 0  # the number of sites ``_by_share`` is indexed for (0: none yet)
        self._by_share: dict[int, list[int]] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, task_id: object) -> bool:
        if not isinstance(task_id, int):
            return False
        index = bisect.bisect_left(self._ids, task_id)
        return index < len(self._ids) and self._ids[index] == task_id

    def add(self, task_id: int) -> None:
        bisect.insort(self._ids, task_id)
        if self._shares:
            share = share_index(task_id, self._shares)
            bisect.insort(self._by_share.setdefault(share, []), task_id)

    def remove(self, task_id: int) -> bool:
        """Forget a task (taken); False if it is not here."""
        index = bisect.bisect_left(self._ids, task_id)
        if index == len(self._ids) or self._ids[index] != task_id:
            return False
        del self._ids[index]
        if self._shares:
            kept = self._by_share[share_index(task_id, self._shares)]
            del kept[bisect.bisect_left(kept, task_id)]
        return True

    def own(self, share: int, shares: int, keep: int) -> list[int]:
        self._index(shares)
        return self._by_share.get(share, [])[:keep]

    def others(self, share: int, shares: int, keep: int) -> list[int]:
        if shares <= 1 or keep <= 0:
            return []  # one site: every task is its share
        found: list[int] = []
        for task_id in reversed(self._ids):  # at least every other block is another's
            if share_index(task_id, shares) != share:
                found.append(task_id)
                if len(found) == keep:
                    break
        found.reverse()
        return found

    def _index(self, shares: int) -> None:
        if shares == self._shares:
            return
        by_share: dict[int, list[int]] = {}
        for task_id in self._ids:  # in order: each list is too
            by_share.setdefault(share_index(task_id, shares), []).append(task_id)
        self._shares, self._by_share = shares, by_share
