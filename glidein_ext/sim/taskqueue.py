"""The simulated Task Queue: one server (a SimPy resource of capacity 1, as the real store
serialises the protocol calls behind one lock), the queue's state kept by the real
``tq.service.matching.matcher.Matcher`` (pre-DHT and centralized) or, for a distributed site's
master, the offers of the real ``sched.offers.choose_offers`` (the product's Task Queue calls it
too), and the run's counters.

Each request travels ``tq_latency``, waits its turn, is served (its operation runs the real cores
at the start of its service, and takes the time the cost model charges for their work), and
travels back.  Congestion is the queue in front of that one server; nothing else slows the Task
Queue down.  Service time: ``TqCosts.call`` per request, ``TqCosts.per_row`` per row a bulk call
reads or writes, and for a match the calibrated matcher cost (``sim.calibration``): with
``tq_cost="grouped"`` the work the real matcher did (its classad2 evaluations, its groups, the
pilot's cached files); with ``"per-task"`` the work of a matcher that examines every queued task
for each request (Delgado Peris 2014 §II: "all queued tasks must be examined"), i.e. ours with one
task per group: a classad2 evaluation per task this pilot has not seen yet, a look at every queued
task.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Generator, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

import simpy

from glidein_ext.sched.offers import Made, Member, Runnable, choose_offers
from glidein_ext.sim.calibration import CostModel
from glidein_ext.sim.config import SimConfig
from glidein_ext.sim.offer_index import UnheldTasks
from glidein_ext.sim.recorder import Recorder
from glidein_ext.sim.workload import Dependencies, SimTask
from glidein_ext.tq.models import PilotInfo, QueuedTask
from glidein_ext.tq.service.matching.matcher import Matcher

Op = Callable[[], tuple[Any, float]]  # an operation: (its answer, its service time)


@dataclass(frozen=True)
class Outcome:
    """A task attempt's end, as a pilot reports it."""

    task_id: int
    attempt: int
    ok: bool
    started: float
    ended: float
    origins: dict[str, int]


class SimTaskQueue:
    """The Task Queue's state and its single server."""

    def __init__(
        self,
        env: simpy.Environment,
        config: SimConfig,
        costs: CostModel,
        recorder: Recorder,
        tasks: list[SimTask],
    ) -> None:
        self.env = env
        self.config = config
        self.costs = costs
        self.recorder = recorder
        self.server = simpy.Resource(env, capacity=1)
        wait = config.wait_for_data if config.cache.wait_for_data else 0.0
        self.matcher = Matcher(wait_for_data=wait)
        self.deps = Dependencies(tasks)
        self.tasks = self.deps.tasks
        self.queued: list[int] = []  # queued task ids, in order (priority is equal: age)
        self.attempts: dict[int, int] = {}
        self.ended: set[int] = set()
        self.made: dict[str, Made] = {}  # where each produced file was made, and by whom
        self.pilot_site: dict[int, int] = {}
        self.workers: dict[int, int] = {}  # pilots that run tasks -> site (not the masters)
        self.busy: set[int] = set()
        # the queued tasks as the offers see them (its keys: whether a task is queued); those
        # none of whose inputs was made indexed apart (``sim.offer_index``), the others' ids
        self._runnable: dict[int, Runnable] = {}
        self._unheld = UnheldTasks()
        self._held: list[int] = []
        self.finished = env.event()
        self.changed: list[Callable[[], None]] = []  # called when tasks become runnable
        self._seq: dict[int, int] = {}  # task -> admission number (per-task cost)
        self._seqs: list[int] = []
        self._next_seq = 0
        self._seen: dict[int, int] = {}  # pilot -> last admission number it examined
        self._latest: dict[int, int] = {}  # site -> the number of its master's newest call
        self._ended: dict[int, Any] = {}  # site -> the event that ends its waiting call
        # site -> the tasks of its last offers that another site gets first (``Offers.shared``)
        self.shared: dict[int, frozenset[int]] = {}
        # the working pilots by site, as the offers see them (kept as they change: a sync of a
        # large pool would otherwise list every pilot of every site again)
        self._members: dict[str, dict[int, Member]] = {}

    # --- the server ---

    def call(self, kind: str, op: Op) -> Generator[Any, Any, Any]:
        """One request: there, the queue, the service, back; the operation's answer."""
        latency = self.config.network.tq_latency
        yield self.env.timeout(latency)
        self.recorder.request(kind, self.env.now, len(self.server.queue))
        answer = yield from self._serve(op)
        yield self.env.timeout(latency)
        return answer

    def _serve(self, op: Op) -> Generator[Any, Any, Any]:
        with self.server.request() as turn:
            yield turn
            answer, service = op()
            yield self.env.timeout(service)
        return answer

    # --- the queue ---

    def submit(self) -> None:
        """The workflow arrives: its runnable tasks are queued."""
        self.recorder.submit(len(self.tasks), self.env.now)
        self._queue(self.deps.initial())

    def _queue(self, task_ids: Iterable[int]) -> None:
        now = self.env.now
        added = False
        for task_id in task_ids:
            task = self.tasks[task_id]
            bisect.insort(self.queued, task_id)
            self._runnable[task_id] = Runnable(task_id, UnheldTasks.group, task.inputs, 0, now)
            if any(lfn in self.made for lfn in task.inputs):
                bisect.insort(self._held, task_id)
            else:
                self._unheld.add(task_id)
            self.matcher.add_task(QueuedTask(task_id, task.spec, task.inputs, 0, now))
            self._next_seq += 1
            self._seq[task_id] = self._next_seq
            self._seqs.append(self._next_seq)
            added = True
        if added:
            for notify in self.changed:
                notify()

    def take(self, task_id: int, pilot_id: int) -> int:
        index = bisect.bisect_left(self.queued, task_id)
        del self.queued[index]
        del self._runnable[task_id]
        if not self._unheld.remove(task_id):
            del self._held[bisect.bisect_left(self._held, task_id)]
        self.matcher.remove_task(task_id)
        seq = self._seq.pop(task_id)
        del self._seqs[bisect.bisect_left(self._seqs, seq)]
        self.matcher.set_idle(pilot_id, False)
        self._set_busy(pilot_id, True)
        self.attempts[task_id] = self.attempts.get(task_id, 0) + 1
        return self.attempts[task_id]

    def _end(self, pilot_id: int, outcome: Outcome) -> int:
        """A completion; how many tasks it released."""
        if outcome.task_id in self.ended and self.attempts.get(outcome.task_id) == outcome.attempt:
            return 0  # a resend (an abandoned long poll carried it): the pilot may run another
        self.matcher.set_idle(pilot_id, True)
        self._set_busy(pilot_id, False)
        if outcome.task_id in self.ended or self.attempts.get(outcome.task_id) != outcome.attempt:
            return 0  # a duplicate or stale report: not counted
        self.recorder.accepted(
            pilot_id, outcome.started, outcome.ended, outcome.origins, outcome.ok
        )
        task = self.tasks[outcome.task_id]
        released: list[int] = []
        if outcome.ok:
            self.ended.add(task.task_id)
            site = self.pilot_site.get(pilot_id, 0)
            for lfn in task.outputs:
                self.made[lfn] = Made(str(site), pilot_id, self.config.file_size)
            if self.config.architecture != "distributed":
                self.matcher.add_cached(pilot_id, task.outputs)  # the TQ learns its outputs
            released = self.deps.produced(task.outputs)
        elif outcome.attempt > self.config.max_retries:
            self.ended.add(task.task_id)  # failed for good
        else:
            released = [task.task_id]  # retried
        self._queue(released)
        if len(self.ended) == len(self.tasks) and not self.finished.triggered:
            self.recorder.finish(self.env.now)
            self.finished.succeed()
        return len(released)

    # --- operations (each returns its answer and its service time) ---

    def register(self, pilot_id: int, site: int, host: str, works: bool = True) -> Op:
        """A pilot registers; ``works``: it runs tasks (a simulated master does not)."""

        def op() -> tuple[Any, float]:
            self.pilot_site[pilot_id] = site
            if works:
                self.workers[pilot_id] = site
                self._member(pilot_id)
            if self.config.architecture != "distributed":
                self.matcher.add_pilot(PilotInfo(pilot_id, site=f"S{site}", host=host))
                self._seen[pilot_id] = 0
            return None, self.config.costs.call

        return op

    def deregister(self, pilot_id: int) -> Op:
        """A pilot leaves (its bye): the matcher forgets it (and what it caches)."""

        def op() -> tuple[Any, float]:
            self.matcher.remove_pilot(pilot_id)
            site = self.workers.pop(pilot_id, None)
            if site is not None:
                self._members[str(site)].pop(pilot_id, None)
            return None, self.config.costs.call

        return op

    def request(self, pilot_id: int, cached: set[str] | None) -> Op:
        """A pilot asks for a task (centralized: with its cache list)."""

        def op() -> tuple[Any, float]:
            matcher = self.matcher
            if cached is not None:
                matcher.set_cache(pilot_id, cached)
            before = matcher.evaluations
            choice = matcher.choose(pilot_id, self.env.now)
            info = matcher.pilot(pilot_id)
            n_cached = len(info.cached) if info is not None else 0
            if self.config.tq_cost == "per-task":
                seen = self._seen.get(pilot_id, 0)
                fresh = len(self._seqs) - bisect.bisect_right(self._seqs, seen)
                self._seen[pilot_id] = self._next_seq
                work = self.costs.match_time(fresh, len(self.queued), n_cached)
            else:
                evaluations = matcher.evaluations - before
                work = self.costs.match_time(evaluations, matcher.group_count, n_cached)
            answer = None
            if choice is not None:
                answer = (self.tasks[choice.task_id], self.take(choice.task_id, pilot_id))
            return answer, self.config.costs.call + work

        return op

    def heartbeat(self, pilot_id: int, cached: set[str] | None) -> Op:
        """A heartbeat (pre-DHT: with the cache list, the file tracking of Delgado Peris 2014
        §IV.A)."""

        def op() -> tuple[Any, float]:
            if cached is not None:
                self.matcher.set_cache(pilot_id, cached)
            return None, self.config.costs.call

        return op

    def complete(self, pilot_id: int, outcome: Outcome) -> Op:
        def op() -> tuple[Any, float]:
            released = self._end(pilot_id, outcome)
            return None, self.config.costs.call + self.config.costs.per_row * released

        return op

    # --- the distributed site's bulk calls (Delgado Peris 2014 §III.B) ---

    def offers(self, site: int, want: int) -> tuple[list[SimTask], int]:
        """What the Task Queue offers ``site`` (``sched.offers.choose_offers``, as the product's
        ``sync``): the queued tasks in age order (those none of whose inputs was made by
        share, ``sim.offer_index``), where each input was made and by whom, every working pilot
        and whether it is idle.  The simulated tasks have no Requirements of their own (every
        pilot matches every task)."""
        queued = map(self._runnable.__getitem__, self._held)
        members = {site: pilots.values() for site, pilots in self._members.items()}
        chosen = choose_offers(
            str(site),
            want,
            queued,
            self.made,
            members,
            _every,
            self.env.now,
            self.matcher.wait_for_data,
            self._unheld,
        )
        self.shared[site] = chosen.shared
        return [self.tasks[t] for t in chosen.task_ids], chosen.runnable

    def _set_busy(self, pilot_id: int, busy: bool) -> None:
        """The pilot runs a task now (or no longer): ``busy`` and its member's state."""
        if busy:
            self.busy.add(pilot_id)
        else:
            self.busy.discard(pilot_id)
        self._member(pilot_id)

    def _member(self, pilot_id: int) -> None:
        """A working pilot's entry among the offers' members, made again when it registers or
        becomes busy or idle (a master's entry: none)."""
        site = self.workers.get(pilot_id)
        if site is not None:
            name = str(site)
            self._members.setdefault(name, {})[pilot_id] = Member(
                pilot_id, name, pilot_id not in self.busy
            )

    def sync(self, site: int, outcomes: list[tuple[int, Outcome]], want: int) -> Op:
        def op() -> tuple[Any, float]:
            released = sum(self._end(pilot, outcome) for pilot, outcome in outcomes)
            offers, runnable = self.offers(site, want)
            rows = len(outcomes) + released + len(offers)
            costs = self.config.costs
            return (offers, runnable), costs.call + costs.per_row * rows

        return op

    def long_sync(
        self, site: int, outcomes: list[tuple[int, Outcome]], want: int, wait: float
    ) -> Generator[Any, Any, tuple[list[SimTask], int]]:
        """A ``sync`` that, finding nothing runnable for the site, waits up to ``wait``
        seconds at the server for tasks that are (one request; the product's long poll)."""
        latency = self.config.network.tq_latency
        yield self.env.timeout(latency)
        self.recorder.request("sync", self.env.now, len(self.server.queue))
        number = self._begin(site)
        offers, runnable = yield from self._serve(self.sync(site, outcomes, want))
        deadline = self.env.now + wait
        while not runnable and self.env.now < deadline and not self.finished.triggered:
            woke = self._ended[site] = self.env.event()

            def wake(woke: Any = woke) -> None:
                if not woke.triggered:
                    woke.succeed()

            self.changed.append(wake)
            yield self.env.any_of([woke, self.finished, self.env.timeout(deadline - self.env.now)])
            self.changed.remove(wake)
            if self._latest[site] != number:
                break  # a newer call of the site ended this one
            offers, runnable = yield from self._serve(self.sync(site, [], want))
        yield self.env.timeout(latency)
        return offers, runnable

    def _begin(self, site: int) -> int:
        """A call of the site's master: its number; the site's waiting call ends."""
        number = self._latest[site] = self._latest.get(site, 0) + 1
        ended = self._ended.pop(site, None)
        if ended is not None and not ended.triggered:
            ended.succeed()
        return number

    def assign(
        self,
        site: int,
        pairs: list[tuple[int, int]],
        rank_sum: float,
        served: int,
        outcomes: list[tuple[int, Outcome]] | None = None,
    ) -> Op:
        """The master's assignment, after the completions it carries (a round without a
        ``sync``): each task taken if still queued; (task, pilot, attempt, successors, more), the
        successors being the waiting tasks the task's success alone releases (as the product's
        ``assign`` names them, ``Placed.successors``)."""

        def op() -> tuple[Any, float]:
            self._begin(site)
            done = outcomes or []
            released = sum(self._end(pilot, outcome) for pilot, outcome in done)
            placed = []
            rows = len(done) + released + len(pairs)
            for task_id, pilot_id in pairs:
                if task_id in self._runnable:  # still queued
                    attempt = self.take(task_id, pilot_id)
                    after, more, needs = self._successors(task_id, pilot_id)
                    rows += len(after)
                    offers = [self.tasks[t] for t in after]
                    placed.append((task_id, pilot_id, attempt, offers, more, needs))
            self.recorder.round(rank_sum, served)
            costs = self.config.costs
            return placed, costs.call + costs.per_row * rows

        return op

    def _successors(
        self, task_id: int, pilot_id: int
    ) -> tuple[list[int], bool, list[tuple[int, ...]]]:
        """The waiting tasks the task's success releases, with the other unfinished tasks each
        needs (a merge's other makers), but for those with an input made at another site
        (``choose_offers`` decides where those go); whether other waiting tasks read its
        outputs (the product's ``Placed.more``); and each successor's needs."""
        site = str(self.pilot_site.get(pilot_id, 0))
        outputs = self.tasks[task_id].outputs
        found, needs = [], []
        for reader, others in self.deps.successors(outputs):
            made = (self.made.get(lfn) for lfn in self.tasks[reader].inputs)
            if all(m is None or m.site == site for m in made):
                found.append(reader)
                needs.append(others)  # as the product's: every maker of a missing input
        return found, self.deps.readers(outputs) > len(found), needs

    def release(self, task_ids: Iterable[int]) -> None:
        """Tasks assigned but lost (never delivered): queued again."""
        self._queue(t for t in task_ids if t not in self.ended and t not in self._runnable)


def _every(pilot_id: int, group: Hashable) -> bool:
    return True
