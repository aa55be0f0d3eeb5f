"""Cache-aware matching of one pilot to the best runnable task (Hasham 2011 §IV-E), pure and in
memory.

- Requirements and Rank: evaluated with classad2 once per (task group, pilot), where a group is
  every queued task with the same MatchSpec (DIRAC's task queues); answers equal ``symmetricMatch``
  and Rank on each task's own ad, because a task's match ad is its MatchSpec and nothing else.
- Resources and life: a task needs RequestCpus/Memory/Disk within the pilot's, and its MaxRunTime
  within the pilot's remaining life (the TTL of Hasham 2011 §IV-E): no task outlives its pilot.
- Locality: tasks are indexed by input LFN, so a request only looks at tasks that read a file the
  pilot caches; the best task is the one with most inputs in the pilot's cache (Hasham 2011 §IV-E).
- waitForData (Hasham 2011 §IV-E): a task none of whose inputs this pilot holds is not given to it
  while another *idle* pilot holds one of them, for at most ``wait_for_data`` seconds after the task
  became runnable; after that any pilot may take it, since a task can always read from the SE.

Order of preference among matching tasks: locality hits, the pilot's Rank of the task, the task's
Rank of the pilot, the task's priority, then first submitted.

Costly expressions (regexp and its kin, ``tq.client.limits.COSTLY_CALL``): with ``defer_costly``
(the service) a pair of a pilot and a group of which either side calls one is never evaluated
here; it does not match until ``settle`` gives it a verdict found elsewhere
(``tq.service.costly``: in a worker process, within a time budget), and ``pending_costly`` lists
the pairs waiting for one.  Both may be called without the store's lock: they read and write
single dictionary entries only.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import classad2

from glidein_ext import classads
from glidein_ext.tq.client.limits import COSTLY_CALL
from glidein_ext.tq.models import MatchSpec, PilotInfo, QueuedTask


def task_ad(spec: MatchSpec) -> classad2.ClassAd:
    """The ClassAd a task is matched with: its MatchSpec (Hasham 2011 §IV-E)."""
    attrs: dict[str, classads.Scalar] = dict(spec.attributes)
    attrs.update(
        RequestCpus=spec.request_cpus,
        RequestMemory=spec.request_memory,
        RequestDisk=spec.request_disk,
        MaxRunTime=spec.max_runtime,
    )
    return classads.make_ad(attrs, {"Requirements": spec.requirements, "Rank": spec.rank})


def pilot_ad(pilot: PilotInfo) -> classad2.ClassAd:
    """The ClassAd a pilot is matched with: what it registered (Hasham 2011 §IV-E: Host, SE,
    site)."""
    attrs: dict[str, classads.Scalar] = dict(pilot.attributes)
    attrs.update(
        Site=pilot.site,
        Host=pilot.host,
        SE=pilot.se,
        Cpus=pilot.cpus,
        Memory=pilot.memory,
        Disk=pilot.disk,
    )
    return classads.make_ad(attrs, {"Requirements": pilot.requirements, "Rank": pilot.rank})


@dataclass(frozen=True)
class Verdict:
    """One group's answer for one pilot: matched, and the two Ranks."""

    matched: bool
    pilot_rank: float = 0.0
    task_rank: float = 0.0


@dataclass(frozen=True)
class Choice:
    """The task the matcher picked, and why."""

    task_id: int
    hits: int  # inputs found in the pilot's cache
    pilot_rank: float
    task_rank: float


_NO_MATCH = Verdict(False)
_UNSETTLED = Verdict(False)  # a costly pair without a verdict yet: no match for now (not cached)


def costly(*texts: str) -> bool:
    """Whether an expression among ``texts`` calls regexp or its kin (``COSTLY_CALL``)."""
    return any(COSTLY_CALL.search(text) for text in texts)


class _Group:
    """Queued tasks with one MatchSpec, kept in order of (-priority, task id)."""

    def __init__(self, spec: MatchSpec) -> None:
        self.spec = spec
        self.ad = task_ad(spec)
        self.costly = costly(spec.requirements, spec.rank)
        self.order: list[tuple[int, int]] = []
        self._text: str | None = None

    @property
    def text(self) -> str:
        """The group's ad as ClassAd text (for a worker process)."""
        if self._text is None:
            self._text = str(self.ad)
        return self._text

    def add(self, task: QueuedTask) -> None:
        bisect.insort(self.order, (-task.priority, task.task_id))

    def remove(self, task: QueuedTask) -> None:
        item = (-task.priority, task.task_id)
        index = bisect.bisect_left(self.order, item)
        if index < len(self.order) and self.order[index] == item:
            del self.order[index]


class Matcher:
    """The in-memory queue state: groups, the input-file index, pilots and their caches."""

    def __init__(self, wait_for_data: float = 0.0, defer_costly: bool = False) -> None:
        self.wait_for_data = wait_for_data
        self.defer_costly = defer_costly  # costly pairs wait for ``settle`` (the module)
        self._costly_groups: set[str] = set()
        self._costly_pilots: set[int] = set()
        self._tasks: dict[int, QueuedTask] = {}
        self._groups: dict[str, _Group] = {}
        self._task_group: dict[int, str] = {}
        self._by_input: defaultdict[str, set[int]] = defaultdict(set)
        self._pilots: dict[int, PilotInfo] = {}
        self._pilot_ads: dict[int, classad2.ClassAd] = {}
        self._holders: defaultdict[str, set[int]] = defaultdict(set)  # LFN -> pilots caching it
        self._verdicts: dict[tuple[int, str], Verdict] = {}
        self.evaluations = 0  # classad2 group evaluations (for benchmarks and tests)

    # --- tasks ---

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, task_id: int) -> bool:
        return task_id in self._tasks

    @property
    def group_count(self) -> int:
        return len(self._groups)

    def task_ids(self) -> set[int]:
        """The queued tasks held (a pool instance compares them with the database)."""
        return set(self._tasks)

    def pilot_ids(self) -> set[int]:
        """The pilots held."""
        return set(self._pilots)

    def add_task(self, task: QueuedTask) -> None:
        if task.task_id in self._tasks:
            self.remove_task(task.task_id)
        key = task.spec.key()
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group(task.spec)
            if group.costly:
                self._costly_groups.add(key)
        group.add(task)
        self._tasks[task.task_id] = task
        self._task_group[task.task_id] = key
        for lfn in task.inputs:
            self._by_input[lfn].add(task.task_id)

    def remove_task(self, task_id: int) -> None:
        task = self._tasks.pop(task_id, None)
        if task is None:
            return
        key = self._task_group.pop(task_id)
        group = self._groups[key]
        group.remove(task)
        if not group.order:
            del self._groups[key]
            self._costly_groups.discard(key)
            for pilot_id in self._pilots:
                self._verdicts.pop((pilot_id, key), None)
        for lfn in task.inputs:
            holders = self._by_input.get(lfn)
            if holders is not None:
                holders.discard(task_id)
                if not holders:
                    del self._by_input[lfn]

    # --- pilots ---

    def add_pilot(self, pilot: PilotInfo) -> None:
        self.remove_pilot(pilot.pilot_id)
        self._pilots[pilot.pilot_id] = pilot
        self._pilot_ads[pilot.pilot_id] = pilot_ad(pilot)
        if costly(pilot.requirements, pilot.rank):
            self._costly_pilots.add(pilot.pilot_id)
        for lfn in pilot.cached:
            self._holders[lfn].add(pilot.pilot_id)

    def remove_pilot(self, pilot_id: int) -> None:
        pilot = self._pilots.pop(pilot_id, None)
        if pilot is None:
            return
        self._pilot_ads.pop(pilot_id, None)
        self._costly_pilots.discard(pilot_id)
        self._forget_cache(pilot)
        for key in self._groups:
            self._verdicts.pop((pilot_id, key), None)

    def pilot(self, pilot_id: int) -> PilotInfo | None:
        return self._pilots.get(pilot_id)

    def set_idle(self, pilot_id: int, idle: bool) -> None:
        pilot = self._pilots.get(pilot_id)
        if pilot is not None:
            pilot.idle = idle

    def set_cache(self, pilot_id: int, files: Iterable[str]) -> None:
        """Replace a pilot's cache list (centralized mode: sent with each request)."""
        pilot = self._pilots.get(pilot_id)
        if pilot is None:
            return
        self._forget_cache(pilot)
        pilot.cached = set(files)
        for lfn in pilot.cached:
            self._holders[lfn].add(pilot_id)

    def add_cached(self, pilot_id: int, files: Iterable[str]) -> None:
        """Files a pilot now caches (pre-DHT mode: outputs it reported)."""
        pilot = self._pilots.get(pilot_id)
        if pilot is None:
            return
        for lfn in files:
            pilot.cached.add(lfn)
            self._holders[lfn].add(pilot_id)

    def needed_cached(
        self, pilot_id: int, limit: int, cached: Iterable[str] | None = None
    ) -> tuple[str, ...] | None:
        """Of the pilot's cached files (``cached``, or the list held), those a queued task reads,
        at most ``limit`` (the first found, in no particular order); None for a pilot not held.
        From the input index: one set lookup per cached file until ``limit`` are found, no
        query."""
        pilot = self._pilots.get(pilot_id)
        if pilot is None:
            return None
        index = self._by_input
        files = pilot.cached if cached is None else cached
        return tuple(itertools.islice((lfn for lfn in files if lfn in index), limit))

    def holders(self, lfn: str) -> set[int]:
        return set(self._holders.get(lfn, ()))

    def _forget_cache(self, pilot: PilotInfo) -> None:
        for lfn in pilot.cached:
            holders = self._holders.get(lfn)
            if holders is not None:
                holders.discard(pilot.pilot_id)
                if not holders:
                    del self._holders[lfn]

    # --- matching ---

    def verdict(self, pilot_id: int, key: str) -> Verdict:
        """Requirements both ways and the two Ranks, for one group and one pilot (cached)."""
        cached = self._verdicts.get((pilot_id, key))
        if cached is not None:
            return cached
        group = self._groups[key]
        if self.defer_costly and (group.costly or pilot_id in self._costly_pilots):
            return _UNSETTLED
        pilot_ad_ = self._pilot_ads[pilot_id]
        self.evaluations += 1
        if classads.symmetric_match(group.ad, pilot_ad_):
            found = Verdict(
                True, classads.rank(pilot_ad_, group.ad), classads.rank(group.ad, pilot_ad_)
            )
        else:
            found = _NO_MATCH
        self._verdicts[(pilot_id, key)] = found
        return found

    def pending_costly(
        self, pilot_id: int, now: float, limit: int | None = None
    ) -> list[tuple[str, str, str]]:
        """The pilot's costly pairs that fit its resources and have no verdict yet, as (group
        key, the group's ad text, the pilot's ad text); at most ``limit``."""
        pilot = self._pilots.get(pilot_id)
        pilot_ad_ = self._pilot_ads.get(pilot_id)
        if not self.defer_costly or pilot is None or pilot_ad_ is None:
            return []
        keys = list(self._groups) if pilot_id in self._costly_pilots else list(self._costly_groups)
        remaining = pilot.remaining(now)
        found: list[tuple[str, str, str]] = []
        pilot_text: str | None = None
        for key in keys:
            group = self._groups.get(key)
            if group is None or (pilot_id, key) in self._verdicts:
                continue
            if not self._fits(group.spec, pilot, remaining):
                continue
            pilot_text = pilot_text or str(pilot_ad_)
            found.append((key, group.text, pilot_text))
            if limit is not None and len(found) >= limit:
                break
        return found

    def settle(self, pilot_id: int, key: str, verdict: Verdict) -> None:
        """A costly pair's verdict, found elsewhere (``pending_costly``)."""
        if pilot_id in self._pilots and key in self._groups:
            self._verdicts[(pilot_id, key)] = verdict

    def _fits(self, spec: MatchSpec, pilot: PilotInfo, remaining: float) -> bool:
        return (
            spec.request_cpus <= pilot.cpus
            and spec.request_memory <= pilot.memory
            and spec.request_disk <= pilot.disk
            and spec.max_runtime <= remaining
        )

    def _usable(self, pilot: PilotInfo, key: str, remaining: float) -> Verdict:
        if not self._fits(self._groups[key].spec, pilot, remaining):
            return _NO_MATCH
        return self.verdict(pilot.pilot_id, key)

    def matching(self, pilot_id: int, now: float) -> dict[int, Verdict]:
        """Every queued task this pilot may run, with its Ranks (for tests and status)."""
        pilot = self._pilots[pilot_id]
        remaining = pilot.remaining(now)
        found: dict[int, Verdict] = {}
        for key, group in self._groups.items():
            verdict = self._usable(pilot, key, remaining)
            if verdict.matched:
                for _, task_id in group.order:
                    found[task_id] = verdict
        return found

    def held(self, task: QueuedTask, pilot_id: int, now: float) -> bool:
        """waitForData: keep ``task`` for an idle pilot that holds its data (bounded in time)."""
        if not task.inputs or now >= task.runnable_since + self.wait_for_data:
            return False
        for lfn in task.inputs:
            for other in self._holders.get(lfn, ()):
                if other != pilot_id and self._pilots[other].idle:
                    return True
        return False

    def choose(self, pilot_id: int, now: float) -> Choice | None:
        """The best task for this pilot now, or None; the caller then removes it (assigns it)."""
        pilot = self._pilots[pilot_id]
        remaining = pilot.remaining(now)
        verdicts: dict[str, Verdict] = {}

        def usable(key: str) -> Verdict:
            verdict = verdicts.get(key)
            if verdict is None:
                verdict = verdicts[key] = self._usable(pilot, key, remaining)
            return verdict

        # Locality first (Hasham 2011 §IV-E): only tasks that read a file this pilot caches.
        hits: defaultdict[int, int] = defaultdict(int)
        for lfn in pilot.cached:
            for task_id in self._by_input.get(lfn, ()):
                hits[task_id] += 1
        best: tuple[int, float, float, int, int] | None = None
        for task_id, count in hits.items():
            task = self._tasks[task_id]
            verdict = usable(self._task_group[task_id])
            if not verdict.matched:
                continue
            score = (count, verdict.pilot_rank, verdict.task_rank, task.priority, -task_id)
            if best is None or score > best:
                best = score
        if best is not None:
            return Choice(-best[4], best[0], best[1], best[2])

        # Then the best group, each group's tasks in (priority, age) order, skipping held ones.
        ranked = []
        for key, group in self._groups.items():
            verdict = usable(key)
            if verdict.matched:
                neg_priority, first = group.order[0]
                order = (-verdict.pilot_rank, -verdict.task_rank, neg_priority, first)
                ranked.append((order, key))
        heapq.heapify(ranked)
        while ranked:
            _, key = heapq.heappop(ranked)
            verdict = verdicts[key]
            for _, task_id in self._groups[key].order:
                if not self.held(self._tasks[task_id], pilot_id, now):
                    return Choice(task_id, 0, verdict.pilot_rank, verdict.task_rank)
        return None

    def choose_several(self, pilot_id: int, now: float, count: int) -> list[Choice]:
        """The ``count`` best tasks for this pilot now, best first; nothing is removed.  A pool
        of TQ instances offers them all to one take (another instance may be taking the
        first: Lee 2003, 4.2)."""
        if count <= 1:
            first = self.choose(pilot_id, now)
            return [] if first is None else [first]
        chosen: list[Choice] = []
        aside: list[QueuedTask] = []
        try:
            while len(chosen) < count and (choice := self.choose(pilot_id, now)) is not None:
                chosen.append(choice)
                aside.append(self._tasks[choice.task_id])
                self.remove_task(choice.task_id)
        finally:
            for task in aside:
                self.add_task(task)
        return chosen

    def queued_groups_for(self, template: PilotInfo, now: float) -> list[int]:
        """Queued tasks per group that a pilot like ``template`` could run (Hasham 2011 §IV-A, line
        5)."""
        ad = pilot_ad(template)
        remaining = template.remaining(now)
        counts = []
        for group in self._groups.values():
            if not self._fits(group.spec, template, remaining):
                continue
            # A costly group is counted unevaluated (never on the event loop's GIL): at most
            # the site's max_pilots more pilots than its tasks could use.
            if (self.defer_costly and group.costly) or classads.symmetric_match(group.ad, ad):
                counts.append(len(group.order))
        return counts
