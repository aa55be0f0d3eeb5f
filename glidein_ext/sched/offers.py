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
  priority, then local before not, then age.  Offered by age alone, a step-1 task of a serial
  chain is rarely in the TaskList while the pilot holding its input is idle: with thousands of
  step-0 tasks queued ahead of it, the master's locality ranks have nothing to choose from.

At most ``want`` tasks are offered; :attr:`Offers.runnable` says how many the site may run now
(the master asks for another round when it is more than it got).  File sizes: the Task Queue does
not know them (``Made.size`` is 1 there: inputs counted as equal); the simulator passes its own.
Python 3.9 compatible: the pilots' master does not import this, but ``sched`` stays so.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

# The order of a site's offers among tasks of equal priority (module docstring).
LOCAL, OTHER = 0, 1


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


class _Sites:
    """Which sites have a pilot (an idle pilot) matching a group; memoised for one call."""

    def __init__(self, members: Iterable[Member], matches: Callable[[int, Hashable], bool]) -> None:
        self.matches = matches
        self.pilots: dict[str, list[Member]] = {}
        for member in members:
            self.pilots.setdefault(member.site, []).append(member)
        self._any: dict[tuple[str, Hashable], bool] = {}
        self._idle: dict[tuple[str, Hashable], bool] = {}
        self._able: dict[Hashable, frozenset[str]] = {}

    def able(self, group: Hashable) -> frozenset[str]:
        """The sites with a registered pilot this group matches."""
        found = self._able.get(group)
        if found is None:
            found = frozenset(site for site in self.pilots if self._has(site, group, False))
            self._able[group] = found
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
    queued: Sequence[Runnable],
    made: Mapping[str, Made],
    members: Iterable[Member],
    matches: Callable[[int, Hashable], bool],
    now: float,
    hold: float,
) -> Offers:
    """The tasks to offer ``site`` (at most ``want``), from ``queued`` in age order (module
    docstring).  ``made``: where each produced input was made (an input missing from it was
    there from the start: on the SE only); ``members``: every registered pilot of every site."""
    sites = _Sites(members, matches)
    idle_here = {m.pilot_id for m in sites.pilots.get(site, ()) if m.idle}
    chosen: list[tuple[int, int, int, int]] = []  # (-priority, not local, position, task id)
    runnable = 0
    for position, task in enumerate(queued):
        able = sites.able(task.group)
        if site not in able:
            continue  # no pilot of the site may run it (Requirements, resources)
        held: dict[str, int] = {}
        tier = OTHER
        for lfn in task.inputs:
            where = made.get(lfn)
            if where is None:
                continue
            if where.site in able:
                held[where.site] = held.get(where.site, 0) + where.size
            if where.site == site and where.pilot_id in idle_here:
                tier = LOCAL
        if held and not _ours(site, task, held, sites, now, hold):
            continue
        runnable += 1
        chosen.append((-task.priority, tier, position, task.task_id))
    if want <= 0:
        return Offers((), runnable, 0)
    best = sorted(chosen)[:want]
    return Offers(tuple(item[3] for item in best), runnable, sum(1 for i in best if i[1] == LOCAL))


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
