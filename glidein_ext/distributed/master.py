"""The master pilot's rounds (Delgado Peris 2014 §III.B-C): the asyncio edge around
``sched.rounds``.

A round: the master calls the Task Queue once (``sync``: the workers' completions, dead workers,
undelivered tasks, and the site's runnable tasks it wants), broadcasts the TaskList over the site
DHT, gets the workers' ranks back through the aggregation tree, builds the rank matrix of its idle
workers and assigns at most one task to each (``sched.assign``: ``optimal`` by default, greedy
when scipy is missing or asked for), tells the Task Queue (``assign``, one call, each task taken
atomically) and then each assigned worker (MESSAGE ``assign``).  An idle worker that finished a
task with a successor (the Task Queue names them with each accepted pair) gets it without ranking
(``sched.stock``).  Rounds without a ``sync``, their ``assign`` carrying the completions: one whose
idle workers all have such a successor has no TaskList; another ranks a TaskList of the last
``sync``'s offers no round placed.  Rounds come after events (a completion, a worker's hello, a
TaskList cut to fit a datagram) and a short batching window, or every ``period`` without events; a
call comes at least every ``heartbeat`` (only the master heartbeats in this architecture, for
itself and its workers).  Workers that miss rounds and a probe are reported dead.  A leaving
pilot's role ends with a last ``sync`` of what it holds (:meth:`MasterRole.close`).  Each pair
``assign`` refuses is logged (task, pilot, reason; rate limited), and the rounds' phase timings
ride the next ``sync`` to the Task Queue's counters.  A call refused as stale (another pilot holds
the role) ends the role; one refused for its credential (revoked) ends the pilot.

The workers' hello/done/bye messages, sealed with each worker's key for this master's epoch,
are taken by ``distributed.inbox`` (the keys come with the claim's answer and with ``sync``); the
hand-outs of assigned tasks and the probes of suspects run beside the rounds in
``distributed.delivery``.

The role is one task on the process's event loop, owned by the pilot's worker; the Task Queue's
blocking client runs in the loop's executor.  Python 3.9 + standard library, except that the
``optimal`` method needs numpy and scipy (``greedy`` otherwise, with a log line).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from glidein_ext.dht import wire
from glidein_ext.dht.node import DhtNode
from glidein_ext.dht.protocol import BODY_BUDGET
from glidein_ext.distributed.delivery import Deliveries
from glidein_ext.distributed.inbox import WorkerInbox
from glidein_ext.distributed.phases import RoundPhases
from glidein_ext.errors import (
    DhtError,
    MissingDependencyError,
    StaleMasterError,
    TaskQueueAuthError,
    TaskQueueError,
)
from glidein_ext.sched.assign import (
    DEFAULT_METHOD,
    FALLBACK_METHOD,
    assign,
    optimal_available,
    other_method,
)
from glidein_ext.sched.matrix import RankMatrix, in_order, rank_sum
from glidein_ext.sched.ranking import InputFile, TaskEntry, TaskSpec
from glidein_ext.sched.roundrecords import Report
from glidein_ext.sched.rounds import RoundBook
from glidein_ext.sched.stock import OfferStock
from glidein_ext.sched.tasklist import (
    TaskList,
    decode_replies,
    encode_tasklist,
    fit_tasks,
    reply_limit,
)
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.protocol import (
    Completion,
    Pair,
    RoundReport,
    SiteAssign,
    SiteCompletion,
    SitePilot,
    SiteSync,
    TaskOffer,
)

T = TypeVar("T")
log = logging.getLogger("glidein_ext.distributed.master")
TASKLIST_BUDGET = BODY_BUDGET - 256  # the broadcast's own fields
REPLY_BUDGET = int(BODY_BUDGET * 0.85)  # the aggregated replies, in one datagram at the root
TOPIC = "tasklist"
CLOSE_TIMEOUT = 10.0  # seconds a leaving master gives its last round, hand-outs and sync


class MasterRole:
    """The site's master: its rounds, and the workers' hello/done/bye messages."""

    def __init__(
        self,
        node: DhtNode,
        client: TqClient,
        site: str,
        pilot_id: int,
        epoch: int,
        *,
        window: float,
        period: float,
        heartbeat: float,
        grace: float = 0.0,
        method: str = DEFAULT_METHOD,
        broadcast_timeout: float = 2.0,
        on_step_down: Callable[[str], None] = lambda reason: None,
    ) -> None:
        self.node = node
        self.client = client
        self.site = site
        self.pilot_id = pilot_id
        self.epoch = epoch
        self.solver = RoundSolver(method, log)  # the assignment method, greedy without scipy
        self.on_step_down = on_step_down
        self.book = RoundBook(
            pilot_id,
            window=window,
            period=period,
            heartbeat=heartbeat,
            grace=grace,
            long_poll=True,
            now=time.monotonic(),
        )
        self.stock: OfferStock[TaskOffer] = OfferStock(spare=heartbeat)  # successors, spares
        self.rank_sums: list[float] = []  # one per round that assigned (reports, tests)
        self.active = True
        self._wake: asyncio.Event | None = None
        self._poll: asyncio.Future[Any] | None = None  # the last long poll's call
        self.phases = RoundPhases()  # the rounds' phases, timed (``distributed.phases``)
        self._more = False  # the last sync left runnable tasks unasked for
        self.waits = BroadcastWait(broadcast_timeout)  # the TaskList's wait for its replies
        self._closing = False  # the pilot leaves: a last sync, then the role ends
        self._closed_clean = False  # the last sync got through
        self.refused = RefusedLog(log)  # the refused pairs' lines, rate limited
        self._ended: asyncio.Event | None = None  # set when :meth:`run` returns
        # The workers' messages and keys; the hand-outs and probes in flight.
        self.inbox = WorkerInbox(
            node, self.book, epoch, poke=self._poke, active=self._active, quiet=self._quiet
        )
        self.deliveries = Deliveries(
            node, self.book, epoch, self.inbox, poke=self._poke, handed=self._handed
        )

    # --- the workers' messages (on the event loop: ``distributed.inbox``) ----------------------

    def install(self, pilots: Sequence[SitePilot] = ()) -> None:
        """Take the messages of a master; ``pilots``: the site's live pilots at a takeover."""
        self.inbox.install(pilots)

    def local_done(self, pilot_id: int, completion: Completion) -> None:
        """A completion, from a worker or from this pilot's own last task."""
        self.inbox.local_done(pilot_id, completion)

    def busy(self) -> bool:
        """Whether the site has work: runnable tasks at the Task Queue (its last answer), tasks
        its workers run, completions not yet synced, messages waiting for a key."""
        book = self.book
        running = any(worker.task is not None for worker in book.workers.values())
        return not book.dry or running or bool(book.pending()) or bool(self.inbox.held)

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _active(self) -> bool:
        return self.active

    def _quiet(self, task_id: int, pilot_id: int) -> bool:  # ``OfferStock.quiet``
        held = {key[0] for key, _, _ in self.book.pending()}  # completions the master holds
        return self.stock.quiet(task_id, pilot_id, held)

    # --- the rounds ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Rounds until the role ends (a stale call) or the task is cancelled."""
        self._wake = asyncio.Event()
        self._ended = ended = asyncio.Event()
        log.info("pilot %s is the master of %s (epoch %s)", self.pilot_id, self.site, self.epoch)
        # numpy and scipy take seconds to import on a loaded node: in a thread, now, so that
        # neither the first round that assigns nor the node's event loop waits for them.
        warming = asyncio.get_running_loop().run_in_executor(None, optimal_available)
        try:
            await self._rounds()
        finally:
            if not warming.done():
                warming.cancel()
            log.info(
                "master: %d round(s); in all: %s",
                self.phases.rounds,
                ", ".join(f"{p} {v:.1f} s" for p, v in self.phases.totals.items()),
            )
            self.deliveries.cancel()
            ended.set()

    async def close(self, timeout: float = CLOSE_TIMEOUT) -> bool:
        """The pilot leaves: the round under way ends, the hand-outs in flight end (those that
        did not arrive are released), and one last ``sync`` carries what the master holds -- its
        own completions, its workers' it acknowledged, dead workers, tasks to release -- before
        the role ends (Delgado Peris 2014 §III.B: a master that steps down loses no
        completion).  True when the Task Queue has it all."""
        if not self.active:
            return False
        self._closing = True
        ended = self._ended
        if ended is None:  # the rounds never started: the last sync here
            try:
                return await asyncio.wait_for(self._last_sync(), timeout)
            except TimeoutError:
                return False
            finally:
                self.active = False
        self._poke()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(ended.wait(), timeout)
        self.active = False
        return self._closed_clean

    async def _last_sync(self) -> bool:
        """The leaving master's last call (tried a few times); True when it got through."""
        if self.deliveries.handing:
            await asyncio.wait(list(self.deliveries.handing), timeout=CLOSE_TIMEOUT / 2)
        for _ in range(3):
            report = self.book.take_report(time.monotonic())
            idle = self._poll is None or self._poll.done()  # else a sync ends that poll
            if idle and not (report.completions or report.dead or report.release):
                return True
            if await self._sync(report, 0) is not None:
                log.info(
                    "master: pilot %s leaves; its last sync carried %d completion(s)",
                    self.pilot_id,
                    len(report.completions),
                )
                return True
            if not self.active:
                return False  # stale or refused: nothing more to tell
            await asyncio.sleep(0.5)
        return False

    async def _rounds(self) -> None:
        wake = self._wake
        assert wake is not None
        while self.active:
            if self._closing:
                self._closed_clean = await self._last_sync()
                self.active = False
                await self.inbox.resign(self.book.successors())
                return
            now = time.monotonic()
            if self.book.round_due(now):
                await self._round(now)
            elif self.book.call_due(now):
                await self._sync(self.book.take_report(now), 0)
            else:
                wake.clear()
                wait = self.book.next_wakeup(time.monotonic())
                with contextlib.suppress(asyncio.TimeoutError):  # time for a round or a call
                    await asyncio.wait_for(wake.wait(), timeout=max(wait, 0.01))

    async def _tq(self, call: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(call, *args))

    async def _sync(self, report: Report, want: int, wait: float = 0.0) -> list[TaskOffer] | None:
        """One ``sync`` call; the offers, or None when it failed (the report is kept).
        ``wait``: a long poll (``RoundBook.poll_wait``), abandoned when an event wakes the
        master meanwhile (the report is kept: the Task Queue answers a resent completion as
        such; the master's next call ends the poll there)."""
        for _, completion in report.completions:  # reported here: no successors from the stock
            self.stock.forget(completion.task_id)
        for task_id in report.release:
            self.stock.forget(task_id)
        call = SiteSync(
            pilot_id=self.pilot_id,
            epoch=self.epoch,
            completions=tuple(SiteCompletion(p, c) for p, c in report.completions),
            dead=report.dead,
            release=report.release,
            want=want,
            pilots=self.inbox.asked(time.monotonic()),
            phases=self.phases.unsent(),
            wait=wait,
        )
        try:
            sent = asyncio.ensure_future(self._tq(self.client.sync, self.site, call))
            if wait:  # a long poll: a leaving master ends it at the Task Queue (_last_sync)
                self._poll = sent
            answer = await (unless_woken(sent, self._wake) if wait and self._wake else sent)
            if answer is None:
                self.book.unreported(report)
                return None
        except StaleMasterError as exc:
            self._step_down(str(exc))
            return None
        except TaskQueueAuthError as exc:  # revoked: the Task Queue ended this pilot already
            self._step_down(f"the Task Queue refuses this pilot: {exc}")
            return None
        except TaskQueueError as exc:
            log.warning("master: the Task Queue call failed (kept for the next one): %s", exc)
            self.book.unreported(report)
            return None
        now = time.monotonic()
        self.book.reported(now if answer.seen else None)  # a poll the TQ saw the master end
        self.stock.round_ended(now)  # the Task Queue's offers are fresh now
        if want:  # kept for the next rounds, but those another site gets first
            self.stock.offered([offer for offer in answer.tasks if not offer.shared], now)
        self.book.supply(answer.queued, wait > 0)  # nothing runnable: the site is dry
        self.phases.sent(call.phases)  # the Task Queue has these (counted since)
        if answer.keys or answer.gone:
            await self.inbox.learn(answer.keys, answer.gone)
        # More runnable than asked for: another round, if a worker is left idle (after this
        # round's assignment, see _round; a round for busy workers only costs a call).
        self._more = answer.queued > len(answer.tasks)
        if self._more and not want and self.book.idle():
            self.book.trigger(time.monotonic())
        return list(answer.tasks)

    async def _round(self, now: float) -> None:
        self.phases.start(now - (self.book.first_event or now))
        want = self.book.start_round(now)
        direct = self._direct_pairs(want)
        if direct is not None:  # the successors the Task Queue named (``sched.stock``)
            await self._direct(direct, self.book.take_completions(now))
            return
        found = await self._round_offers(want, now)
        if found is None:
            return  # given up for an event (or failed): the loop looks at it
        offers, done, wait = found
        mark = self.phases.lap("wait" if wait else "sync", now)  # a long poll waits for work
        # The idle makers of successors get theirs; the others rank the rest (``sched.stock``).
        own = self.stock.mine(self.book.idle())
        offers = self.stock.others(offers, self.book.idle())
        entries = [entry_of(offer) for offer in offers]
        idle = len(self.book.idle())

        def build(chosen: Sequence[TaskEntry]) -> Any:
            return encode_tasklist(
                TaskList(
                    round=self.book.round,
                    epoch=self.epoch,
                    master=self.pilot_id,
                    address=self.node.address,
                    successors=self.book.successors(),
                    limit=reply_limit(idle, REPLY_BUDGET),
                    tasks=tuple(chosen),
                )
            )

        payload, fitted = fit_tasks(entries, build, lambda p: len(wire.encode(p)), TASKLIST_BUDGET)
        if fitted < len(entries):
            self.book.trigger(time.monotonic())  # the rest in the next round
        wait = self.waits.wait()
        try:
            result = await self.node.broadcast(TOPIC, payload, timeout=wait)
        except DhtError as exc:
            log.error("master: the TaskList could not be broadcast: %s", exc)
            if done is not None:
                self.book.unreported(done)  # the next call carries them
            return
        self.waits.record(result.elapsed, result.complete, wait)
        mark = self.phases.lap("broadcast", mark)
        replies = decode_replies(result.value, fitted)
        candidates = self.book.replies(replies).without({pilot for _, pilot in own})
        offered = offers[:fitted]
        mark = self.phases.lap("replies", mark)
        if own or (offered and candidates.pilots):
            await self._assign(offered, candidates, idle, done, own)
        elif done is not None:  # the spares fit no idle worker: the next round syncs
            self.stock.refused()
            self.book.unreported(done)
        if self._more and self.book.idle():
            self.book.trigger(time.monotonic())
        mark = time.monotonic()
        await self.deliveries.probe_suspects()
        self.phases.lap("probe", mark)
        idle_replies = sum(1 for reply in replies if reply.idle)
        counts = (len(offered), len(candidates.pilots), idle_replies, len(replies))
        self.phases.account(self.book.round, *counts)
        if not result.complete:
            log.info("master: round %d: the broadcast timed out", self.book.round)

    async def _round_offers(
        self, want: int, now: float
    ) -> tuple[list[TaskOffer], Report | None, float] | None:
        """The round's offers, the completions its ``assign`` carries and the sync's wait: the
        last sync's spares (``OfferStock.spares``: no sync), or a sync's offers; None when
        the sync was given up for an event or failed."""
        spares = self.stock.spares(self.book.idle(), now) if want and self._stocked() else None
        if spares is not None:
            return spares, self.book.take_completions(now), 0.0
        if not (want or self.inbox.held or self.book.call_due(now)):
            return [], None, 0.0
        wait = self.book.poll_wait() if want and not self.inbox.held else 0.0
        got = await self._sync(self.book.take_report(now), want, wait)
        return None if not self.active or (got is None and wait) else (got or [], None, wait)

    def _direct_pairs(self, want: int) -> list[tuple[TaskOffer, int]] | None:
        """This round's pairs when it needs neither a ``sync`` nor a TaskList
        (``OfferStock.direct``): workers wait, each finished a task with a successor, and
        :meth:`_stocked`; None otherwise."""
        for (task_id, _), pilot, completion in self.book.pending():
            self.stock.completed(task_id, completion.exit_code == 0, pilot)
        if not want or not self._stocked():
            return None
        return self.stock.direct(self.book.idle(), self.book.dry)

    def _stocked(self) -> bool:  # a round may go without a sync: it owes none
        return not (self.book.news or self.inbox.held)

    async def _assign(
        self,
        offered: list[TaskOffer],
        candidates: Any,
        idle: int,
        done: Report | None,
        own: Sequence[tuple[TaskOffer, int]],
    ) -> None:
        """The own successors' pairs (``OfferStock.mine``) and the ranked ones."""
        mark = time.monotonic()
        pairs = tuple(Pair(offer.task_id, pilot) for offer, pilot in own)
        report = RoundReport(0.0, 0, idle, len(own), "successor", 0.0, 0)
        if offered and candidates.pilots:
            matrix = RankMatrix.from_replies(
                list(range(len(offered))), in_order(candidates.ranks), candidates.truncated
            )
            # In a thread: a large matrix takes a while, and the node's event loop must go on.
            result, other = await self._tq(self.solver.solve_both, matrix)
            pairs += tuple(
                Pair(offered[row].task_id, candidates.pilots[col]) for row, col in result.pairs
            )
            ranks = candidates.ranks  # the workers' own, not in_order's
            report = RoundReport(
                rank_sum(result.pairs, ranks),
                result.served,
                idle,
                len(offered),
                result.method,
                rank_sum(other.pairs, ranks) if other is not None else 0.0,
                other.served if other is not None else 0,
            )
        mark = self.phases.lap("solve", mark)
        await self._place(pairs, [*offered, *(offer for offer, _ in own)], report, done, mark)

    async def _direct(self, direct: Sequence[tuple[TaskOffer, int]], done: Report) -> None:
        """A round without a TaskList (``OfferStock.direct``): each idle worker gets a
        successor of the task it finished, whose input it holds.  Its report ranks nothing
        (the counters' ranks stay those of the ranked rounds)."""
        mark = time.monotonic()
        pairs = tuple(Pair(offer.task_id, pilot) for offer, pilot in direct)
        idle = len(self.book.idle())
        report = RoundReport(0.0, 0, idle, len(pairs), "successor", 0.0, 0)
        await self._place(pairs, [offer for offer, _ in direct], report, done, mark)
        self.book.leftover(self.stock.round_ended(now := time.monotonic()), now)
        self.phases.account(self.book.round, len(pairs), len(pairs), idle, 0)

    async def _place(
        self,
        pairs: tuple[Pair, ...],
        offered: Sequence[TaskOffer],
        report: RoundReport,
        done: Report | None,
        mark: float,
    ) -> None:
        """The round's ``assign`` (with the completions it carries), then the hand-outs."""
        completions = tuple(SiteCompletion(p, c) for p, c in (done.completions if done else ()))
        call = SiteAssign(self.pilot_id, self.epoch, pairs, report, completions)
        called = time.monotonic()
        try:
            answer = await self._tq(self.client.assign, self.site, call)
        except StaleMasterError as exc:
            self._step_down(str(exc))
            return
        except TaskQueueAuthError as exc:
            self._step_down(f"the Task Queue refuses this pilot: {exc}")
            return
        except TaskQueueError as exc:
            log.warning("master: assign failed (the tasks stay queued): %s", exc)
            if done is not None:
                self.book.unreported(done)  # the next call carries them again
            return
        if done is not None:
            self.book.reported(called)
        for item in answer.accepted:
            self.stock.placed(item.task_id, item.successors, item.more, item.needs)
        self.rank_sums.append(report.rank_sum)
        if answer.refused:  # another site took a task, say: no spare any more
            self.refused.write(answer.refused, time.monotonic())
            self.stock.refused([item.task_id for item in answer.refused])
        placed = [(p.task_id, p.pilot_id, p.attempt) for p in answer.accepted]
        self.book.assigned(placed, delivering=True)
        self.book.took(len(placed), time.monotonic())
        by_id = {offer.task_id: offer for offer in offered}
        self.phases.lap("tq_assign", mark)
        # Handed out while the next round goes on: the book knows they are on their way.
        self.deliveries.start([(by_id[t], p, a) for t, p, a in placed])

    def _handed(self, seconds: float) -> None:
        """A round's hand-outs ended after ``seconds`` (beside the next round): its phase."""
        self.phases.add("hand_out", seconds)

    def _step_down(self, reason: str) -> None:
        log.warning("master: pilot %s steps down: %s", self.pilot_id, reason)
        self.active = False
        self.on_step_down(reason)


# --- broadcastwait -----------------------------------------------------------------------------
BROADCAST_FLOOR = 0.5  # seconds: the shortest TaskList wait
BROADCAST_SAMPLES = 16  # recent broadcasts the wait is fitted to


class BroadcastWait:
    """The recent broadcasts' durations, and the next one's wait."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.recent: deque[float] = deque(maxlen=BROADCAST_SAMPLES)  # their durations

    def wait(self) -> float:
        """The next broadcast's wait (the timeout while none is known)."""
        if not self.recent:
            return self.timeout
        ordered = sorted(self.recent)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        return min(self.timeout, max(BROADCAST_FLOOR, 3 * p90))

    def record(self, elapsed: float, complete: bool, waited: float) -> None:
        """A broadcast ended after ``elapsed`` seconds; one that timed out counts as twice its
        wait."""
        self.recent.append(elapsed if complete else 2 * waited)


# --- longpoll ----------------------------------------------------------------------------------


def _drop(future: asyncio.Future[Any]) -> None:
    """An abandoned call's end: its error is read (not logged as never retrieved)."""
    if not future.cancelled():
        future.exception()


async def unless_woken(call: Awaitable[T], wake: asyncio.Event) -> T | None:
    """``call``'s result, or None when ``wake`` is set first (it is cleared before the call and
    set again then: the caller's loop looks at what woke it)."""
    wake.clear()
    pending = asyncio.ensure_future(call)
    woken = asyncio.ensure_future(wake.wait())
    try:
        await asyncio.wait({pending, woken}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        woken.cancel()
    if pending.done():
        return pending.result()
    pending.add_done_callback(_drop)
    wake.set()
    return None


# --- offerentry --------------------------------------------------------------------------------
def entry_of(offer: TaskOffer) -> TaskEntry:
    """A Task Queue offer as a TaskList entry (``sched.ranking``)."""
    spec = TaskSpec(
        offer.requirements,
        offer.rank,
        offer.request_cpus,
        offer.request_memory,
        offer.request_disk,
        float(offer.max_runtime),
        tuple(sorted(offer.attributes.items())),
    )
    return TaskEntry(offer.task_id, spec, tuple(InputFile(lfn) for lfn in offer.inputs))


# --- solver ------------------------------------------------------------------------------------
class RoundSolver:
    """Assigns with ``method``, falling back to ``greedy`` for good when it cannot run."""

    def __init__(self, method: str, log: logging.Logger) -> None:
        self.method = method
        self._log = log

    def solve(self, matrix: RankMatrix) -> Any:
        try:
            return assign(matrix, self.method)
        except MissingDependencyError as exc:
            self._log.warning("master: %s; assigning with %s instead", exc, FALLBACK_METHOD)
            self.method = FALLBACK_METHOD
            return assign(matrix, FALLBACK_METHOD)

    def solve_both(self, matrix: RankMatrix) -> tuple[Any, Any]:
        """The assignment, and the other method's on the same matrix (for the counters)."""
        result = self.solve(matrix)
        return result, self.compare(matrix, result.method)

    def compare(self, matrix: RankMatrix, method: str) -> Any:
        """The other method on the same matrix, for the counters (None without scipy)."""
        try:
            return assign(matrix, other_method(method))
        except MissingDependencyError:
            return None


# --- refused -----------------------------------------------------------------------------------
REFUSED_BURST = 20  # refused pairs logged one a line per REFUSED_PERIOD; the rest counted
REFUSED_PERIOD = 60.0


class RefusedLog:
    """The refused pairs' lines, at most ``REFUSED_BURST`` a ``REFUSED_PERIOD``."""

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._since = -REFUSED_PERIOD  # the period's start,
        self._logged = 0  # the lines logged in it,
        self._quiet = 0  # and the pairs not logged

    def write(self, refused: Sequence[Any], now: float) -> None:
        """One line per refused pair (``Refused``: the task, the pilot, why) while the period's
        burst lasts; the rest counted."""
        if now - self._since >= REFUSED_PERIOD:
            if self._quiet:
                self._log.info(
                    "master: %d more refused pair(s) in the last %.0f s, not logged",
                    self._quiet,
                    now - self._since,
                )
            self._since = now
            self._logged = 0
            self._quiet = 0
        for item in refused:
            if self._logged >= REFUSED_BURST:
                self._quiet += 1
                continue
            self._logged += 1
            self._log.info(
                "master: the Task Queue refused task %s for pilot %s: %s",
                item.task_id,
                item.pilot_id,
                item.reason,
            )
