"""Which queued tasks the Task Queue offers a distributed site's master (Delgado Peris 2014
§III.B: the Task Queue selects the tasks by site; the master matches them to its pilots), pure.

The Task Queue (``tq.service.store.offers``) and the simulator (``sim.taskqueue``) both call
:func:`choose_offers`; this module decides, they only gather its inputs.

- **Requirements.** A site is offered only the tasks whose Requirements match, both ways, at least
  one of its registered pilots (``matches(pilot_id, group)``; tasks of one group match alike).  A
  task no pilot of the site could run would only fill its TaskList.
- **Where.** Every output is staged out to the SE, and the pilot that made it keeps it in its cache
  (the site DHT finds it there).  A task goes to the site(s) that hold most of its input bytes,
  among the sites with a pilot it matches; on a tie, to each of them (the first ``assign`` takes
  it, atomically).  The inputs held elsewhere are read from the SE: a merge whose inputs were made
  at two sites runs at one of them.  So that no runnable task waits while matching pilots are
  idle, the other matching sites get it too when none of those sites has an idle pilot it
  matches, or once it has been runnable for ``hold`` seconds (the waitForData bound of Hasham 2011
  §IV-E).  A task none of whose inputs a site holds goes to every site it matches.
- **Order: local first.**  The tasks with an input made by an idle pilot of the site come first
  (that pilot caches it: its master's ranking will give it to that pilot), then the others; by
  priority, then local before not, then the site's share before the others', then age.  Offered by
  age alone, a step-1 task of a serial chain is rarely in the TaskList while the pilot holding its
  input is idle: with thousands of step-0 tasks queued ahead of it, the master's locality ranks
  have nothing to choose from.

- **Shares.**  A task several sites may have is one site's share: of the sites holding most of
  its inputs (of all the sites it matches when none holds any), the one its id picks, by blocks
  of ``SHARE_BLOCK`` ids (a workflow's neighbours, often read together, as a merge's inputs,
  stay at one site).  Within a tier a site is offered its share first, by age, then the
  others', newest first (``Offers.shared``): their site takes them from the oldest, so two
  masters seldom pick the same task, and each may keep its offers for the next rounds
  (``sched.stock``).  No task waits for its share's site: the others get it once their own
  share is placed.

At most ``want`` tasks are offered; :attr:`Offers.runnable` says how many the site may run now
(the master asks for another round when it is more than it got).  File sizes: the Task Queue does
not know them (``Made.size`` is 1 there: inputs counted as equal); the simulator passes its own.
Python 3.9 compatible: the pilots' master does not import this, but ``sched`` stays so.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

# The order of a site's offers among tasks of equal priority (module docstring).
LOCAL, OTHER = 0, 1
# Tasks with consecutive ids (a workflow's neighbours, often read together) share a site.
SHARE_BLOCK = 32


@dataclass(frozen=True)
class Runnable:
    """A queued task as the offers see it; ``group``: tasks with equal groups match alike (the
    Task Queue's MatchSpec key)."""

    task_id: int
    group: Hashable
    inputs: tuple[str, ...] = ()
    priority: int = 0
    since: float = 0.0  # runnable since (seconds, the caller's clock)


@dataclass(frozen=True)
class Made:
    """Where an input was made: the site, the pilot that made it (it caches it), its size."""

    site: str
    pilot_id: int | None = None
    size: int = 1


@dataclass(frozen=True)
class Member:
    """A registered pilot: its site and whether it is idle."""

    pilot_id: int
    site: str
    idle: bool


@dataclass(frozen=True)
class Offers:
    """The tasks offered, best first; how many the site may run now; how many are local."""

    task_ids: tuple[int, ...] = ()
    runnable: int = 0
    local: int = 0
    # of them, the tasks another site gets first (its share): the master keeps none of these
    # for later rounds (``sched.stock``), that site may take them meanwhile
    shared: frozenset[int] = frozenset()


class Unheld(Protocol):
    """The queued tasks none of whose inputs was made (so no site holds any), of one ``group``
    and priority 0, in id order, kept by a caller that indexes them by share
    (:func:`share_index`) so that a choice reads ``keep`` of them, not all (the simulator's
    ``sim.offer_index``).  Their offers follow from the id alone: every site that may run the
    group may have them, none first for locality; the site whose share one is gets it first."""

    @property
    def group(self) -> Hashable: ...

    def __len__(self) -> int: ...

    def own(self, share: int, shares: int, keep: int) -> list[int]:
        """The oldest ``keep`` whose ``share_index(id, shares)`` is ``share``, oldest first."""
        ...

    def others(self, share: int, shares: int, keep: int) -> list[int]:
        """The newest ``keep`` whose ``share_index(id, shares)`` is not ``share``, oldest
        first."""
        ...


def share_index(task_id: int, shares: int) -> int:
    """Which of ``shares`` sites (sorted) a task none of whose inputs a site holds is the share
    of: by blocks of ``SHARE_BLOCK`` ids (module docstring, Shares)."""
    return task_id // SHARE_BLOCK % shares


def by_site(members: Iterable[Member]) -> dict[str, list[Member]]:
    """``members`` grouped by their site, as :func:`choose_offers` takes them."""
    pilots: dict[str, list[Member]] = {}
    for member in members:
        pilots.setdefault(member.site, []).append(member)
    return pilots


class _Sites:
    """Which sites have a pilot (an idle pilot) matching a group; memoised for one call."""

    def __init__(
        self, pilots: Mapping[str, Collection[Member]], matches: Callable[[int, Hashable], bool]
    ) -> None:
        self.matches = matches
        self.pilots = pilots
        self._any: dict[tuple[str, Hashable], bool] = {}
        self._idle: dict[tuple[str, Hashable], bool] = {}
        self._able: dict[Hashable, frozenset[str]] = {}
        self._sorted: dict[Hashable, tuple[str, ...]] = {}

    def able(self, group: Hashable) -> frozenset[str]:
        """The sites with a registered pilot this group matches."""
        found = self._able.get(group)
        if found is None:
            found = frozenset(site for site in self.pilots if self._has(site, group, False))
            self._able[group] = found
        return found

    def able_sorted(self, group: Hashable) -> tuple[str, ...]:
        """``able``, in order (a task's share is picked from it: :func:`_share`)."""
        found = self._sorted.get(group)
        if found is None:
            found = self._sorted[group] = tuple(sorted(self.able(group)))
        return found

    def idle_match(self, site: str, group: Hashable) -> bool:
        return self._has(site, group, True)

    def _has(self, site: str, group: Hashable, idle: bool) -> bool:
        memo = self._idle if idle else self._any
        key = (site, group)
        known = memo.get(key)
        if known is None:
            known = any(
                self.matches(m.pilot_id, group)
                for m in self.pilots.get(site, ())
                if m.idle or not idle
            )
            memo[key] = known
        return known


def choose_offers(
    site: str,
    want: int,
    queued: Iterable[Runnable],
    made: Mapping[str, Made],
    members: Mapping[str, Collection[Member]],
    matches: Callable[[int, Hashable], bool],
    now: float,
    hold: float,
    unheld: Unheld | None = None,
) -> Offers:
    """The tasks to offer ``site`` (at most ``want``), from ``queued`` in age order (module
    docstring).  ``made``: where each produced input was made (an input missing from it was
    there from the start: on the SE only); ``members``: every registered pilot of every site, by
    site (:func:`by_site`; a caller that keeps them so, as the simulator does, need not list
    every pilot of the pool again for each call).  ``unheld``: the queue's tasks none of whose
    inputs was made, indexed apart (:class:`Unheld`; ``queued`` then holds the others, and the
    age order is the ids'): the same offers as with all of them in ``queued``.

    The offers are the ``want`` smallest of (-priority, tier, not the site's share, position:
    an own share's from the oldest, another's from the newest).  Within one (priority, tier,
    share) the order is the queue's, so each keeps only its ``want`` oldest (own share) or
    newest (another's) as the queue goes by: one pass, no key or sort per queued task."""
    sites = _Sites(members, matches)
    idle_here = {m.pilot_id for m in sites.pilots.get(site, ()) if m.idle}
    keep = max(want, 0)
    # (-priority, tier, 0 own share / 1 another's), as -priority * 4 + tier * 2 + share (the
    # same order) -> task ids, in queue order
    classes: dict[int, list[int] | deque[int]] = {}
    # the sites a group may run at, sorted and as a set; none if this site may not run it
    groups: dict[Hashable, tuple[tuple[str, ...], frozenset[str]]] = {}
    runnable = 0
    for task in queued:
        group = task.group
        known = groups.get(group)
        if known is None:
            able_set = sites.able(group)
            known = groups[group] = (
                (sites.able_sorted(group), able_set) if site in able_set else ((), frozenset())
            )
        able, able_set = known
        if not able:
            continue  # no pilot of the site may run it (Requirements, resources)
        held: dict[str, int] | None = None  # bytes of its inputs made at each site it may run
        tier = OTHER
        for lfn in task.inputs:
            where = made.get(lfn)
            if where is None:
                continue
            if where.site in able_set:
                held = held or {}
                held[where.site] = held.get(where.site, 0) + where.size
            if where.site == site and where.pilot_id in idle_here:
                tier = LOCAL
        if held:
            if not _ours(site, task, held, sites, now, hold):
                continue
            share = 0 if _share(task.task_id, held, able) == site else 1
        else:  # _share without held inputs: the share of the sites that may run it
            share = 0 if able[share_index(task.task_id, len(able))] == site else 1
        runnable += 1
        if not keep:
            continue
        key = -task.priority * 4 + tier * 2 + share
        kept = classes.get(key)
        if kept is None:
            kept = classes[key] = deque(maxlen=keep) if share else []
        if share or len(kept) < keep:  # another's: the newest ``keep`` (a bounded deque)
            kept.append(task.task_id)
    if unheld is not None and site in sites.able(unheld.group):
        runnable += len(unheld)
        if keep:
            _add_unheld(classes, unheld, sites.able_sorted(unheld.group).index(site), keep, sites)
    if not keep:
        return Offers((), runnable, 0)
    return _best(classes, keep, runnable)


def _best(classes: Mapping[int, Sequence[int]], keep: int, runnable: int) -> Offers:
    """The first ``keep`` of the classes in their keys' order, an own share's oldest first,
    another's newest first."""
    best: list[tuple[int, int, int]] = []  # (task id, tier, share), best first
    for key in sorted(classes):
        tier, share = key % 4 // 2, key % 2
        kept = classes[key]
        ordered = reversed(kept) if share else kept  # another's share from its newest
        best.extend((task_id, tier, share) for task_id in ordered)
        if len(best) >= keep:
            break
    best = best[:keep]
    return Offers(
        tuple(item[0] for item in best),
        runnable,
        sum(1 for item in best if item[1] == LOCAL),
        frozenset(item[0] for item in best if item[2]),
    )


def _add_unheld(
    classes: dict[int, list[int] | deque[int]], unheld: Unheld, share: int, keep: int, sites: _Sites
) -> None:
    """The unheld tasks' candidates merged, by id, into their classes (tier ``OTHER``,
    priority 0): the oldest ``keep`` of the site's share, the newest ``keep`` of the others'."""
    shares = len(sites.able_sorted(unheld.group))
    own_key, other_key = OTHER * 2, OTHER * 2 + 1
    own = unheld.own(share, shares, keep)
    if own:
        merged = heapq.merge(classes.get(own_key, ()), own)
        classes[own_key] = list(itertools.islice(merged, keep))
    others = unheld.others(share, shares, keep)
    if others:
        newest: deque[int] = deque(heapq.merge(classes.get(other_key, ()), others), maxlen=keep)
        classes[other_key] = newest


def _share(task_id: int, held: Mapping[str, int], able: Sequence[str]) -> str:
    """The site whose share a task is: of the sites holding most of its inputs (every site
    that may run it when none holds any), the one its id picks.  A task offered to several
    sites comes first to the site whose share it is, so that two masters rarely pick the same
    task, and each may keep an earlier answer's offers for its next rounds (``sched.stock``).
    ``able``: the sites that may run it, sorted."""
    if held:
        most = max(held.values())
        homes: Sequence[str] = sorted(other for other, size in held.items() if size == most)
    else:
        homes = able
    return homes[share_index(task_id, len(homes))]


def _ours(
    site: str, task: Runnable, held: Mapping[str, int], sites: _Sites, now: float, hold: float
) -> bool:
    """Whether ``site`` may have a task whose inputs are held at the sites of ``held`` (bytes per
    site, sites with a pilot it matches only)."""
    most = max(held.values())
    if held.get(site, 0) == most:
        return True
    if now >= task.since + hold:
        return True  # it waited long enough for the sites that hold more of its inputs
    homes = [other for other, size in held.items() if size == most]
    return not any(sites.idle_match(other, task.group) for other in homes)
