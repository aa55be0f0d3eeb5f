"""Cache-aware matching of one pilot to the best runnable task (Hasham 2011 §IV-E), pure and in
memory.

- Requirements and Rank: evaluated once per (task group, pilot), where a group is every queued
  task with the same MatchSpec (DIRAC's task queues); answers equal ``symmetricMatch`` and Rank on
  each task's own ad, because a task's match ad is its MatchSpec and nothing else.  Expressions of
  the common subset are compiled (``tq.service.matching.compiled``), and groups whose expressions
  differ only in constants are evaluated together for a pilot, one numpy operation per expression
  node over all of them (``tq.service.matching.batched``), as DIRAC's TaskQueueDB matches on
  indexed columns; the rest is evaluated with classad2.  The groups and their ads are
  ``tq.service.matching.match_groups``, the batches the matcher keeps and each pilot's answers
  ``tq.service.matching.match_batches``.
- Resources and life: a task needs RequestCpus/Memory/Disk within the pilot's, and its MaxRunTime
  within the pilot's remaining life (the TTL of Hasham 2011 §IV-E): no task outlives its pilot.
- Locality: tasks are indexed by input LFN, so a request only looks at tasks that read a file the
  pilot caches; the best task is the one with most inputs in the pilot's cache (Hasham 2011 §IV-E).
- waitForData (Hasham 2011 §IV-E): a task none of whose inputs this pilot holds is not given to it
  while another *idle* pilot holds one of them, for at most ``wait_for_data`` seconds after the task
  became runnable; after that any pilot may take it, since a task can always read from the SE.

Order of preference among matching tasks: locality hits, the pilot's Rank of the task, the task's
Rank of the pilot, the task's priority, then first submitted.

Costly expressions (regexp and its kin, eval, ``tq.client.limits.costly_calls``): with
``defer_costly`` (the service, its operators' views too) a pair of a pilot and a group of which
either side calls one is never evaluated here; it does not match until ``settle`` gives it a
verdict found elsewhere (``tq.service.matching.costly``: in a worker process, within a time
budget), and ``pending_costly`` lists the pairs waiting for one.  Both may be called without the
store's lock: they read and write single dictionary entries only.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from glidein_ext import classads
from glidein_ext.tq.models import MatchSpec, PilotInfo, QueuedTask
from glidein_ext.tq.service.matching import (
    batched,
    classad_parse,
    classad_values,
    compiled,
    match_several,
)
from glidein_ext.tq.service.matching.match_batches import Batches, Evaluated, Ranked
from glidein_ext.tq.service.matching.match_groups import (
    NO_MATCH,
    MatchGroup,
    Verdict,
    costly,
    pilot_ad,
    pilot_values,
)


@dataclass(frozen=True)
class Choice:
    """The task the matcher picked, and why."""

    task_id: int
    hits: int  # inputs found in the pilot's cache
    pilot_rank: float
    task_rank: float


_UNSETTLED = Verdict(False)  # a costly pair without a verdict yet: no match for now (not cached)
# Up to this many groups, ``_ranked`` orders them one by one: numpy's fixed cost per batch (about
# 30 us a choice) is more than a few cached verdicts cost (measured: 8 us for one group, 32 us for
# 8, level near 12-16 on the 2-core development machine)
FEW_GROUPS = 12


class Matcher:
    """The in-memory queue state: groups, the input-file index, pilots and their caches."""

    def __init__(self, wait_for_data: float = 0.0, defer_costly: bool = False) -> None:
        classads.matchmaking_semantics()  # classad2 resolves bare names as ``compiled`` does
        self.wait_for_data = wait_for_data
        self.defer_costly = defer_costly  # costly pairs wait for ``settle`` (the module)
        self._costly_groups: set[str] = set()
        self._costly_pilots: set[int] = set()
        self._tasks: dict[int, QueuedTask] = {}
        self._groups: dict[str, MatchGroup] = {}
        self._task_group: dict[int, str] = {}
        self._by_input: defaultdict[str, set[int]] = defaultdict(set)
        self._pilots: dict[int, PilotInfo] = {}
        self._pilot_ads: dict[int, classads.ClassAd] = {}
        self._holders: defaultdict[str, set[int]] = defaultdict(set)  # LFN -> pilots caching it
        self._verdicts: dict[tuple[int, str], Verdict] = {}
        self.evaluations = 0  # group evaluations, one per (pilot, group) (benchmarks and tests)
        self._batched = Batches()  # groups evaluated together, and the others ("loose")
        self._pilot_values: dict[int, dict[str, classad_values.Value]] = {}  # plain attributes
        self.on_queued: Callable[[], None] | None = None  # a task queued (``site_waits``)

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
            group = self._groups[key] = MatchGroup(task.spec)
            if group.costly:
                self._costly_groups.add(key)
            self._batched.place(key, group)
        group.add(task)
        if group.batch is not None:
            group.batch.set_first(group.row, *group.order[0])
        self._tasks[task.task_id] = task
        self._task_group[task.task_id] = key
        for lfn in task.inputs:
            self._by_input[lfn].add(task.task_id)
        if self.on_queued is not None:
            self.on_queued()

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
            self._unplace(key, group)
            for pilot_id in self._pilots:
                self._verdicts.pop((pilot_id, key), None)
        elif group.batch is not None:
            group.batch.set_first(group.row, *group.order[0])
        for lfn in task.inputs:
            holders = self._by_input.get(lfn)
            if holders is not None:
                holders.discard(task_id)
                if not holders:
                    del self._by_input[lfn]

    def _unplace(self, key: str, group: MatchGroup) -> None:
        for moved, row in self._batched.unplace(key, group).items():
            self._groups[moved].row = row

    # --- pilots ---

    def add_pilot(self, pilot: PilotInfo) -> None:
        self.remove_pilot(pilot.pilot_id)
        self._pilots[pilot.pilot_id] = pilot
        self._pilot_ads[pilot.pilot_id] = pilot_ad(pilot)
        values = self._pilot_values[pilot.pilot_id] = pilot_values(pilot)
        if costly(pilot.requirements, pilot.rank):
            self._costly_pilots.add(pilot.pilot_id)
        requirements = compiled.compile_expr(pilot.requirements)
        rank = compiled.compile_expr(pilot.rank)
        if not classad_values.plain(values):
            requirements = rank = None
        side: tuple[classad_parse.Node, classad_parse.Node] | None = None
        if pilot.pilot_id not in self._costly_pilots and requirements and rank:
            side = (
                batched.mirrored(requirements.tree, values),
                batched.mirrored(rank.tree, values),
            )
        self._batched.add_pilot(pilot.pilot_id, side)
        for lfn in pilot.cached:
            self._holders[lfn].add(pilot.pilot_id)

    def remove_pilot(self, pilot_id: int) -> None:
        pilot = self._pilots.pop(pilot_id, None)
        if pilot is None:
            return
        self._pilot_ads.pop(pilot_id, None)
        self._pilot_values.pop(pilot_id, None)
        self._batched.remove_pilot(pilot_id)
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
        side = self._batched.pilot_side.get(pilot_id)
        if group.batch is not None and side is not None:
            answers = self._batch_answers(pilot_id, group.batch)
            if answers is not None:
                row = group.row
                if not answers.matched[row]:
                    return NO_MATCH
                return Verdict(True, float(answers.pilot_rank[row]), float(answers.task_rank[row]))
        self.evaluations += 1
        found = group.evaluate(
            self._pilots[pilot_id], self._pilot_values[pilot_id], self._pilot_ads[pilot_id]
        )
        self._verdicts[(pilot_id, key)] = found
        return found

    def known_verdict(self, pilot_id: int, key: str) -> Verdict | None:
        """``verdict`` where the matcher holds the pilot and the group (a queued task of that
        spec), None otherwise; never a costly pair's (``settled``)."""
        group = self._groups.get(key)
        if group is None or pilot_id not in self._pilots:
            return None
        if self.defer_costly and (group.costly or pilot_id in self._costly_pilots):
            return None
        return self.verdict(pilot_id, key)

    def _batch_answers(self, pilot_id: int, batch: batched.Batch) -> Evaluated | None:
        """The batch's groups' answers for this pilot (``Batches.answers``)."""
        found, evaluated = self._batched.answers(pilot_id, batch, self._pilot_values[pilot_id])
        self.evaluations += evaluated
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

    def settled(self, pilot_id: int, key: str) -> Verdict | None:
        """The verdict found for a pair (a costly one's by ``settle``), or None: none yet."""
        return self._verdicts.get((pilot_id, key))

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
            return NO_MATCH
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
        usable = self._usable_once(pilot, remaining)

        # Locality first (Hasham 2011 §IV-E): only tasks that read a file this pilot caches.
        hits = self._hits(pilot)
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
        for _, key, pilot_rank, task_rank in self._ranked(pilot, remaining, usable):
            for _, task_id in self._groups[key].order:
                if not self.held(self._tasks[task_id], pilot_id, now):
                    return Choice(task_id, 0, pilot_rank, task_rank)
        return None

    def _usable_once(self, pilot: PilotInfo, remaining: float) -> Callable[[str], Verdict]:
        """``_usable`` for this pilot, each group's verdict found once."""
        verdicts: dict[str, Verdict] = {}

        def usable(key: str) -> Verdict:
            verdict = verdicts.get(key)
            if verdict is None:
                verdict = verdicts[key] = self._usable(pilot, key, remaining)
            return verdict

        return usable

    def _hits(self, pilot: PilotInfo) -> defaultdict[int, int]:
        """Each queued task reading files the pilot caches: how many."""
        hits: defaultdict[int, int] = defaultdict(int)
        for lfn in pilot.cached:
            for task_id in self._by_input.get(lfn, ()):
                hits[task_id] += 1
        return hits

    def _one_by_one(self, keys: Iterable[str], usable: Any) -> list[Ranked]:
        ranked: list[Ranked] = []
        for key in keys:
            verdict = usable(key)
            if verdict.matched:
                neg_priority, first = self._groups[key].order[0]
                order = (-verdict.pilot_rank, -verdict.task_rank, neg_priority, first)
                ranked.append((order, key, verdict.pilot_rank, verdict.task_rank))
        return ranked

    def _ranked(self, pilot: PilotInfo, remaining: float, usable: Any) -> Iterator[Ranked]:
        """The groups this pilot may run, best first: its Rank of the group, the group's Rank of
        it, the group's first task's priority, then its id.  Batched groups are ordered on
        their columns, as many as are asked for; the rest one by one (all of them when they are
        few: ``FEW_GROUPS``)."""
        side = self._batched.pilot_side.get(pilot.pilot_id)
        if len(self._groups) <= FEW_GROUPS:
            side = None  # each group's verdict is cached per pilot, or its batch's answers
        sources: list[Iterator[Ranked]] = []
        loose = self._groups.keys() if side is None else self._batched.loose
        if side is not None:
            limits = (pilot.cpus, pilot.memory, pilot.disk, remaining)
            values = self._pilot_values[pilot.pilot_id]
            ordered, extra, evaluated = self._batched.ordered(pilot.pilot_id, values, limits)
            self.evaluations += evaluated
            if ordered is None:
                loose = self._groups.keys()  # NaN ranks: the plain heap, as before
            else:
                sources = ordered
                loose = itertools.chain(self._batched.loose, extra)  # type: ignore[assignment]
        ranked = self._one_by_one(loose, usable)
        if sources and any(math.isnan(item[2]) or math.isnan(item[3]) for item in ranked):
            ranked, sources = self._one_by_one(self._groups.keys(), usable), []
        if not sources:
            heapq.heapify(ranked)
            while ranked:
                yield heapq.heappop(ranked)
            return
        ranked.sort()
        yield from heapq.merge(ranked, *sources)

    def choose_several(self, pilot_id: int, now: float, count: int) -> list[Choice]:
        """The ``count`` best tasks for this pilot now, best first, in the order repeated
        ``choose`` calls would give (each removing its pick), in one pass (``match_several``);
        nothing is removed.  A pool of TQ instances offers them all to one take."""
        if count <= 1:
            first = self.choose(pilot_id, now)
            return [] if first is None else [first]
        pilot = self._pilots[pilot_id]
        remaining = pilot.remaining(now)
        usable = self._usable_once(pilot, remaining)
        scored = []
        for task_id, n in self._hits(pilot).items():
            verdict = usable(self._task_group[task_id])
            if verdict.matched:
                task = self._tasks[task_id]
                scored.append((n, verdict.pilot_rank, verdict.task_rank, task.priority, -task_id))
        picks = match_several.several(
            scored,
            self._ranked(pilot, remaining, usable),
            lambda key: self._groups[key].order,
            lambda task_id: self.held(self._tasks[task_id], pilot_id, now),
            count,
        )
        if picks is None:  # NaN Ranks
            return self._choose_one_by_one(pilot_id, now, count)
        return [Choice(*pick) for pick in picks]

    def _choose_one_by_one(self, pilot_id: int, now: float, count: int) -> list[Choice]:
        """``choose_several`` by repeated ``choose`` (each pick set aside, then put back)."""
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
