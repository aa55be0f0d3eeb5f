"""The master's round bookkeeping (Delgado Peris 2014 §III.B-C), pure: the master edge
(``glidein_ext.distributed.master``) drives it with the clock, the workers' messages, the Task
Queue's answers and the aggregated replies.

What it keeps:

- the **roster**: the site's workers (pilot id, DHT address) and the task the master believes
  each runs; workers join with a hello (or from the Task Queue's list at a takeover) and leave
  with a bye, by dying, or when the Task Queue forgets them;
- the **completions** workers reported, until the Task Queue has them (each once, by task and
  attempt; a resend is acknowledged and dropped).  A worker keeps each completion until a master
  tells it the Task Queue has it (:meth:`RoundBook.synced`), and resends it to whoever is master
  meanwhile: a master that steps down (or dies) holding completions loses none;
- workers **awaiting** a completion: a worker that says it is idle, its last task the one the
  master believes it runs (a takeover inherits the Task Queue's view), is busy at the Task Queue
  until that completion arrives; it is no candidate meanwhile, and if the completion has not come
  ``patience`` seconds later the task is released (the Task Queue requeues it and frees the
  pilot), so the master and the Task Queue always converge;
- **dead workers** (missed ``miss_limit`` rounds in a row, did not answer a probe, and unheard for
  ``grace`` seconds: a worker gets the time a master gets before another takes over, so a busy
  process under load is no death) and **tasks to release** (assigned but never delivered, or
  lost by a worker), for the next Task Queue call;
- **when** a round is due: events (a completion, a worker joined or went idle, more tasks at the
  Task Queue) start a batching ``window`` that each further event extends (at most 5 windows),
  and a batch that freed a tenth of the site's workers, or every busy one, is full (its round
  comes at once);
  without events a round comes every ``period`` (the paper's fixed 20 s TaskList period, made a
  fallback), doubled after each empty answer (:meth:`supply`) up to ``idle_max`` (10 s) and the
  heartbeat; a Task Queue call comes at least every ``heartbeat`` seconds (only the master
  heartbeats in this architecture).  Completions ride the round they trigger (its call).  While
  the site is dry (nothing runnable), a round's ``sync`` waits at the Task Queue for work
  (:meth:`poll_wait`, a long poll), and a quiet completion (it releases no task) triggers
  nothing: it rides the next call.

Python 3.9, standard library only.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from glidein_ext.sched.ranking import TASKS_PER_IDLE
from glidein_ext.sched.tasklist import Reply

# --- what the book keeps of each worker and hands out ---------------------------------------

Key = tuple[int, int]  # (task id, attempt)


@dataclass
class Worker:
    """One worker as the master sees it."""

    pilot_id: int
    address: tuple[str, int]
    task: Key | None = None  # what it runs, per the master (None: idle); set by RoundBook._give
    missed: int = 0  # rounds in a row without its reply
    awaiting_since: float | None = None  # idle, the completion of ``task`` not here yet
    delivering: bool = False  # ``task`` is on its way to it (the master hands out meanwhile)
    delivered_in: int = -1  # the round in progress when it acknowledged ``task``
    heard: float = 0.0  # when it was last heard (a reply, a message, a probe answered)
    finished: int = 0  # the task id of its last completion that came (0: none)


@dataclass(frozen=True)
class Report:
    """What a Task Queue call carries for the master: completions (pilot id, completion), dead
    workers, tasks to release."""

    completions: tuple[tuple[int, Any], ...] = ()
    dead: tuple[int, ...] = ()
    release: tuple[int, ...] = ()


@dataclass(frozen=True)
class Candidates:
    """The columns of the round's rank matrix: idle workers that replied, and their ranks."""

    pilots: tuple[int, ...]
    ranks: tuple[dict[int, float], ...]
    truncated: tuple[int, ...]

    def without(self, pilots: Collection[int]) -> Candidates:
        """The candidates but ``pilots`` (given a task of their own this round)."""
        keep = [i for i, pilot in enumerate(self.pilots) if pilot not in pilots]
        cut = set(self.truncated)
        return Candidates(
            tuple(self.pilots[i] for i in keep),
            tuple(self.ranks[i] for i in keep),
            tuple(column for column, i in enumerate(keep) if i in cut),
        )


# --- the book ------------------------------------------------------------------------------------

REMEMBERED = 65536  # completions remembered as reported (resends are answered, not re-reported)
WANT_PER_IDLE = TASKS_PER_IDLE  # runnable tasks fetched per idle worker: a choice to rank
MAX_WANT = 2000
MAX_BATCH = 5  # a round comes at most this many batching windows after the first event
# A batch is full (its round comes at once) when this many workers were freed since the last
# round: FULL_FRACTION of the site, at least FULL_MIN.  A wave of completions at a large site
# then makes rounds of a tenth of the site each, not one after MAX_BATCH windows; a small site,
# whose completions trickle in, still batches by the window, unless the batch freed every busy
# worker (no completion is left to wait for: RoundBook._batch_full).
FULL_FRACTION = 0.1
FULL_MIN = 8
IDLE_MAX = 10.0  # seconds: the longest idle period (as ``agent.settings``' ``poll_max``)
POLL_BEATS = 2  # a long poll lasts this many heartbeats (the Task Queue sees both its ends)
POLL_MAX = 60.0  # seconds, at most: the Task Queue's cap (``tq.service.site_waits.MAX_WAIT``)
PATIENCE = 30.0  # seconds a master awaits a completion a worker says it sent before releasing


def full_batch(workers: float, fraction: float = FULL_FRACTION) -> int:
    """Workers a completion freed since the last round that make a batch full at a site of
    ``workers``: its round comes at once (0 for ``fraction`` 0: no batch is ever full)."""
    if fraction <= 0:
        return 0
    return max(FULL_MIN, math.ceil(fraction * workers))


@dataclass(eq=False)
class RoundBook:
    """The master's state between rounds."""

    me: int
    window: float
    period: float
    heartbeat: float
    miss_limit: int = 3
    patience: float = PATIENCE
    grace: float = 0.0
    idle_max: float = IDLE_MAX
    full_fraction: float = FULL_FRACTION  # 0: rounds by the window alone (the paper's period)
    long_poll: bool = False  # a dry site's round waits at the Task Queue (poll_wait)
    now: float = 0.0
    workers: dict[int, Worker] = field(default_factory=dict, init=False)
    round: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        now = self.now
        self._pending: dict[Key, tuple[int, Any]] = {}
        self._in_flight: dict[Key, tuple[int, Any]] = {}
        self._reported: OrderedDict[Key, None] = OrderedDict()
        self._dead: set[int] = set()
        self._release: set[int] = set()
        self._trigger_at: float | None = None  # the first event since the last round
        self._freed = 0  # workers a completion freed since the last round
        self._last_event = now
        self._last_round = now
        self._last_call = now
        self._dry = 0  # empty answers in a row (the idle period doubles with each)
        self._polls = 0  # of them, answers to long polls
        self._left = 0  # runnable tasks the last answer counted, less those placed since
        self._quiet: set[Key] = set()  # pending completions that wait for the next call
        # the workers with a task (``Worker.task`` is set only through ``_give``): how many are
        # idle is known without visiting every worker at each event
        self._busy: set[int] = set()

    # --- the roster -----------------------------------------------------------------------------

    def join(
        self, pilot_id: int, address: tuple[str, int], now: float, task: Key | None = None
    ) -> None:
        """A worker said hello (or the Task Queue listed it at a takeover)."""
        if pilot_id == self.me:
            return
        worker = self.workers.get(pilot_id)
        if worker is None:
            worker = self.workers[pilot_id] = Worker(pilot_id, address, heard=now)
            self._give(worker, task)
        else:
            worker.address = address
            worker.missed = 0
            worker.heard = max(worker.heard, now)
            # A hello names what the worker ran when it sent it: a late one naming the task
            # whose completion came since is stale (the master may have given it another).
            if task is not None and task[0] != worker.finished:
                self._give(worker, task)
                worker.awaiting_since = None
        self._dead.discard(pilot_id)
        self.trigger(now)

    def leave(self, pilot_id: int) -> None:
        """A worker said bye (it deregisters itself)."""
        self.workers.pop(pilot_id, None)
        self._busy.discard(pilot_id)

    def dead(self, pilot_id: int) -> None:
        """A worker missed its rounds and its probe: reported to the Task Queue, which requeues
        the task it held."""
        if self.workers.pop(pilot_id, None) is not None:
            self._dead.add(pilot_id)
        self._busy.discard(pilot_id)

    def suspects(self) -> list[Worker]:
        """Workers that missed ``miss_limit`` rounds in a row: probe them."""
        return [w for w in self.workers.values() if w.missed >= self.miss_limit]

    def probe_failed(self, pilot_id: int, now: float) -> bool:
        """A suspect did not answer its probe: dead (True) once unheard for ``grace`` seconds;
        until then it stays a suspect, probed again after the next round."""
        worker = self.workers.get(pilot_id)
        if worker is None or now - worker.heard < self.grace:
            return False
        self.dead(pilot_id)
        return True

    def alive(self, pilot_id: int, now: float | None = None) -> None:
        """A probe (or any message) reached the worker."""
        worker = self.workers.get(pilot_id)
        if worker is not None:
            worker.missed = 0
            worker.heard = max(worker.heard, self.now if now is None else now)

    def successors(self, n: int = 3) -> tuple[tuple[int, tuple[str, int]], ...]:
        """The live workers with the lowest ids, and their addresses: who takes over if the
        master dies (Delgado Peris 2014 §III.B)."""
        return tuple((p, self.workers[p].address) for p in sorted(self.workers)[:n])

    def idle(self) -> list[int]:
        """The idle workers, in the order they joined; an empty list, without visiting them,
        when all are busy (most rounds of a large busy site: 1,500 workers at a CMS site)."""
        if not self.any_idle():
            return []
        return [w.pilot_id for w in self.workers.values() if w.task is None]

    def idle_count(self) -> int:
        """``len(idle())``, without listing them."""
        return len(self.workers) - len(self._busy)

    def any_idle(self) -> bool:
        """``bool(idle())``, without listing them."""
        return len(self._busy) < len(self.workers)

    def _all_idle(self) -> bool:
        return bool(self.workers) and not self._busy

    def _give(self, worker: Worker, task: Key | None) -> None:
        """The worker runs ``task`` now (None: it is idle)."""
        worker.task = task
        if task is None:
            self._busy.discard(worker.pilot_id)
        else:
            self._busy.add(worker.pilot_id)

    def awaiting(self) -> list[int]:
        """Workers idle at home but busy at the Task Queue: their completion has not come."""
        return [w.pilot_id for w in self.workers.values() if w.awaiting_since is not None]

    # --- completions ------------------------------------------------------------------------------

    def completed(
        self, pilot_id: int, key: Key, completion: Any, now: float, quiet: bool = False
    ) -> bool:
        """A worker's completion; False for one already held or reported (a resend).  A
        ``quiet`` one (it releases no task) at a dry site while others run triggers no round:
        it waits for the next call (an idle round, or one another event brings)."""
        worker = self.workers.get(pilot_id)
        task = worker.task if worker is not None else None
        resent = key in self._reported or key in self._pending or key in self._in_flight
        if worker is not None:
            worker.heard = max(worker.heard, now)
            if not resent:  # a resend of an older one is not its last (a late busy reply
                worker.finished = key[0]  # naming the last would make it busy again)
        # Its task (attempt 0: known from a reply only), not a resend of an earlier attempt's.
        if worker is not None and task is not None and task[0] == key[0] and task[1] in (0, key[1]):
            self._give(worker, None)
            worker.awaiting_since = None
            worker.delivering = False  # it got the task: it finished it
            self._freed += 1
        if resent:
            return False
        self._pending[key] = (pilot_id, completion)
        if quiet and self._dry and self._busy:
            self._quiet.add(key)  # it waits for others to batch with (none: the site is idle)
        else:
            self.trigger(now)
        return True

    def deferred(self, key: Key) -> bool:
        """A quiet completion held for the next call: it needs no round."""
        return key in self._quiet

    def synced(self, key: Key) -> bool:
        """The Task Queue has this completion (from this master): the worker may forget it."""
        return key in self._reported

    @property
    def _waiting(self) -> set[int]:
        """Workers whose last completion the Task Queue does not have yet and the round's call
        does not carry (a round without a ``sync`` carries those it took in its ``assign``,
        which records them before it checks the pairs): still busy there, so not candidates
        until a call reports it."""
        return {pilot for pilot, _ in self._pending.values()}

    def reported(self, now: float | None = None) -> None:
        """The Task Queue has what the last call carried; ``now``: when it last saw the master
        in it (an ``assign``'s start, a long poll's answer; :meth:`take_report` times a sync)."""
        if now is not None:
            self._last_call = max(self._last_call, now)
        for key in self._in_flight:
            self._reported[key] = None
        self._in_flight.clear()
        while len(self._reported) > REMEMBERED:
            self._reported.popitem(last=False)

    def unreported(self, report: Report) -> None:
        """The call failed: carry everything again next time."""
        self._pending.update(self._in_flight)
        self._in_flight.clear()
        self._dead.update(report.dead)
        self._release.update(report.release)
        self.trigger(self.now)

    # --- timing -----------------------------------------------------------------------------------

    def trigger(self, now: float) -> None:
        """Something changed: a round once events stop coming for the batching window (a wave
        of completions makes one round, not one per completion), at most ``MAX_BATCH``
        windows after the first."""
        self.now = max(self.now, now)
        if self._trigger_at is None:
            self._trigger_at = now
        self._last_event = max(self._last_event, now)

    @property
    def first_event(self) -> float | None:
        """When the first event since the last round came (None: none)."""
        return self._trigger_at

    def _batch_due(self) -> float | None:
        if self._trigger_at is None:
            return None
        return min(self._last_event + self.window, self._trigger_at + MAX_BATCH * self.window)

    def supply(self, runnable: int, polled: bool = False) -> None:
        """A Task Queue answer: how many runnable tasks the site has; ``polled``: the answer to
        a long poll (it waited at the Task Queue)."""
        self._dry = 0 if runnable else min(self._dry + 1, 16)
        self._polls = 0 if runnable else min(self._polls + polled, 16)
        self._left = runnable

    def took(self, placed: int, now: float) -> None:
        """A round placed this many tasks (its pilots already busy here): all that the Task
        Queue's last answer counted, the site is dry (its next round long-polls); some left
        while workers wait (a TaskList cut to fit, ranks short of the workers), the next round
        comes at once."""
        self._left -= placed
        if placed and self._left <= 0 and not self._dry:
            self._dry = 1
        elif placed and self._left > 0 and self.any_idle():
            self.trigger(now)

    @property
    def idle_period(self) -> float:
        """Seconds between rounds without events: ``period``, doubled by each empty answer in a
        row, at most ``idle_max`` and the heartbeat (and never below ``period``).  A master that
        long-polls waits at the Task Queue instead: when the site has just gone idle (no worker
        busy, and its last call was no poll), the next round comes after ``period`` and its
        ``sync`` waits for work, so a workflow submitted then reaches the site at once; each
        empty poll doubles the period as before (a busy site's completions bring its rounds)."""
        empty = self._dry
        if self.long_poll and empty and self.poll_wait() and self._all_idle():
            empty = self._polls
        if not empty:
            return self.period
        longest = min(self.heartbeat, self.idle_max)
        return max(self.period, min(longest, self.period * 2.0**empty))

    def leftover(self, successors: int, now: float) -> None:
        """A round from the successors left some to the Task Queue: the site is not dry, and a
        round offers them if a worker is idle."""
        if successors:
            self.supply(successors)
            if self.any_idle():
                self.trigger(now)

    @property
    def dry(self) -> bool:
        """The Task Queue's last answer had nothing runnable for the site."""
        return self._dry > 0

    @property
    def runnable(self) -> int:
        """Runnable tasks the Task Queue's last answer counted for the site, less those placed
        since (0 or less: none known)."""
        return self._left

    def poll_wait(self) -> float:
        """Seconds a round's ``sync`` may wait at the Task Queue for runnable work (a long
        poll of ``POLL_BEATS`` heartbeats, ``POLL_MAX`` at most): while the site has nothing
        runnable and the master owes nothing but quiet completions; 0 otherwise.  The Task
        Queue sees the master at both ends of the poll (``tq.service.api.sites``; the answer is
        a call: :meth:`reported`).  A completion that needs a round meanwhile makes the master
        give the poll up (``distributed.master_state``)."""
        owed = len(self._pending) > len(self._quiet) or self._in_flight or self.news
        return 0.0 if owed or not self._dry else min(POLL_BEATS * self.heartbeat, POLL_MAX)

    @property
    def full_batch(self) -> int:
        """Freed workers that make a batch full: its round comes at once."""
        return full_batch(len(self.workers), self.full_fraction)

    def _batch_full(self) -> bool:
        """The batch's round comes at once: it freed ``full_batch`` workers, or it freed some
        and no worker is busy any more (no completion is left to wait for: a site smaller
        than ``FULL_MIN``, or the last tasks of a wave).  Never with ``full_fraction`` 0."""
        full = self.full_batch
        return full > 0 and (full <= self._freed or (self._freed > 0 and not self._busy))

    def round_due(self, now: float) -> bool:
        due = self._batch_due()
        if due is not None and (now >= due or self._batch_full()):
            return True
        return now >= self._last_round + self.idle_period

    def call_due(self, now: float) -> bool:
        """A Task Queue call is owed: something to report, or the heartbeat.  Completions wait
        for the round they triggered (its call carries them): they make no call of their own."""
        news = bool(self._dead or self._release)
        owed = len(self._pending) > len(self._quiet)  # quiet ones wait for a round
        news = news or (owed and self._trigger_at is None)
        return news or now >= self._last_call + self.heartbeat

    def next_wakeup(self, now: float) -> float:
        """Seconds until a round or a call may be due."""
        times = [self._last_round + self.idle_period, self._last_call + self.heartbeat]
        due = self._batch_due()
        if due is not None:
            times.append(due)
        return max(0.0, min(times) - now)

    # --- a round ----------------------------------------------------------------------------------

    def start_round(self, now: float) -> int:
        """A round starts: how many runnable tasks to ask for (a choice for every idle worker)."""
        self.now = max(self.now, now)
        self.round += 1
        self._trigger_at = None
        self._freed = 0
        self._last_round = now
        return min(MAX_WANT, WANT_PER_IDLE * self.idle_count())

    def take_report(self, now: float) -> Report:
        """What the next Task Queue call carries; held until :meth:`reported` or
        :meth:`unreported`."""
        completions = self.take_completions(now).completions
        report = Report(completions, tuple(sorted(self._dead)), tuple(sorted(self._release)))
        self._dead.clear()
        self._release.clear()
        self._last_call = now
        return report

    def take_completions(self, now: float) -> Report:
        """What a round's ``assign`` carries when the round makes no ``sync``
        (``sched.stock``): the completions that came so far (dead workers and tasks to release
        make a round ``sync``: :attr:`news`).  Held until :meth:`reported` (with the time of
        the call: it is the master's heartbeat too) or :meth:`unreported` (it failed)."""
        self.now = max(self.now, now)
        self._in_flight.update(self._pending)
        self._pending.clear()
        self._quiet.clear()
        return Report(tuple(self._in_flight.values()))

    @property
    def news(self) -> bool:
        """Dead workers or tasks to release wait for a ``sync``."""
        return bool(self._dead or self._release)

    def pending(self) -> list[tuple[Key, int, Any]]:
        """The completions the Task Queue does not have yet: (task, attempt), the worker, the
        completion."""
        return [
            (key, pilot, completion)
            for key, (pilot, completion) in (*self._pending.items(), *self._in_flight.items())
        ]

    def replies(self, replies: Sequence[Reply]) -> Candidates:
        """The round's aggregated replies: who is alive, who lost its task, the matrix columns.

        A worker that says it is idle while the master believes it runs task T lost it (the
        assignment never arrived, or a new master inherited T from the Task Queue's list): T is
        released, unless T is the task it finished last: then its completion is on its way (the
        worker resends it until the Task Queue has it) and the worker is awaited, busy at the
        Task Queue, no candidate; T is released if it has not come after ``patience`` seconds.
        A worker whose completion the Task Queue does not have yet is no candidate (it is busy
        there).
        """
        heard = {reply.pilot_id: reply for reply in replies if reply.pilot_id in self.workers}
        pilots: list[int] = []
        ranks: list[dict[int, float]] = []
        truncated: list[int] = []
        waiting = self._waiting
        for worker in self.workers.values():
            reply = heard.get(worker.pilot_id)
            if reply is None:
                worker.missed += 1
                continue
            worker.missed = 0
            worker.heard = max(worker.heard, self.now)
            believed = worker.task
            if reply.idle and believed is not None and self._crossed(worker):
                continue  # the reply crossed its assignment: not lost, no candidate
            if reply.idle and believed is not None:
                self._idle_reply(worker, believed, reply.last_done)
            elif not reply.idle:
                worker.awaiting_since = None
                # A reply formed before its completion came says it still runs that task: the
                # master keeps it idle (believing it would await that completion for ever).
                if worker.task is None and reply.current != worker.finished:
                    self._give(worker, (reply.current, 0))
            unreported = worker.pilot_id in waiting
            if reply.idle and worker.task is None and reply.ranks and not unreported:
                if reply.truncated:
                    truncated.append(len(pilots))
                pilots.append(worker.pilot_id)
                ranks.append(reply.ranks)
        return Candidates(tuple(pilots), tuple(ranks), tuple(truncated))

    def _crossed(self, worker: Worker) -> bool:
        """Whether an idle reply of this round may predate the worker's assignment.

        The worker takes an assignment before it acknowledges it, so a reply to a TaskList sent
        after the acknowledgement came knows the task.  This round's TaskList went out after
        :meth:`start_round`; an acknowledgement that came in this round (or has not come yet)
        may be later than the worker's reply, formed before the assignment arrived: that reply
        says nothing about the task.  The next round's reply does."""
        return worker.delivering or worker.delivered_in >= self.round

    def _idle_reply(self, worker: Worker, believed: Key, last_done: int) -> None:
        """An idle worker the master believes busy with ``believed``: lost, or awaited."""
        if last_done == believed[0]:
            if worker.awaiting_since is None:
                worker.awaiting_since = self.now
                return
            if self.now - worker.awaiting_since < self.patience:
                return
        self._release.add(believed[0])  # the Task Queue requeues it and frees the pilot
        self._give(worker, None)
        worker.awaiting_since = None

    def assigned(self, placed: Iterable[tuple[int, int, int]], delivering: bool = False) -> None:
        """The Task Queue accepted these (task, pilot, attempt): the pilots are busy.
        ``delivering``: the master hands them out while its rounds go on; until
        :meth:`delivered` (or :meth:`undelivered`) an idle reply does not mean the task is
        lost."""
        for task_id, pilot_id, attempt in placed:
            worker = self.workers.get(pilot_id)
            if worker is not None:
                self._give(worker, (task_id, attempt))
                worker.awaiting_since = None
                worker.delivering = delivering

    def delivered(self, pilot_id: int) -> None:
        """The worker has its assignment (an idle reply of this round may still predate it:
        :meth:`_crossed`)."""
        worker = self.workers.get(pilot_id)
        if worker is not None:
            worker.delivering = False
            worker.delivered_in = self.round
            worker.heard = max(worker.heard, self.now)

    def unanswered(self, pilot_id: int) -> None:
        """The worker did not answer its assignment: it may have it (the answer was lost) or
        not.  Releasing the task could run it twice; the worker's reply to a TaskList sent
        from now on tells (busy with it, its completion, or idle: then released), and a worker
        that is gone misses its rounds and is found dead (the Task Queue requeues its task)."""
        worker = self.workers.get(pilot_id)
        if worker is not None:
            worker.delivering = False
            worker.delivered_in = self.round

    def release(self, task_ids: Iterable[int]) -> None:
        """Tasks the Task Queue may have placed without the master knowing (an ``assign``
        whose answer was lost): released by the next call, which must be a ``sync`` (news), so
        no round offers them before; the Task Queue requeues those it placed (freeing their
        pilots) and leaves the others queued."""
        self._release.update(task_ids)

    def undelivered(self, task_id: int, pilot_id: int) -> None:
        """An assignment did not reach its worker: the task goes back to the queue."""
        worker = self.workers.get(pilot_id)
        if worker is not None and worker.task is not None and worker.task[0] == task_id:
            self._give(worker, None)
            worker.awaiting_since = None
            worker.delivering = False
        self._release.add(task_id)
