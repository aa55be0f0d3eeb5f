"""The master pilot's rounds (Delgado Peris 2014 §III.B-C): the asyncio edge around
``sched.rounds``.

A round: the master calls the Task Queue once (``sync``: the workers' completions, dead workers,
undelivered tasks, and the site's runnable tasks it wants), broadcasts the TaskList over the site
DHT, gets the workers' ranks back through the aggregation tree, builds the rank matrix of its idle
workers and assigns at most one task to each (``sched.assign``: ``optimal`` by default, greedy
when scipy is missing or asked for), tells the Task Queue (``assign``, one call, each task taken
atomically) and then each assigned worker (MESSAGE ``assign``).  Rounds come after events (a
completion, a worker's hello, a TaskList cut to fit a datagram) and a short batching window, or
every ``period`` without events; a call comes at least every ``heartbeat`` (only the master
heartbeats in this architecture, for itself and its workers).  Workers that miss rounds and a
probe are reported dead.  A leaving pilot's role ends with a last ``sync`` of what it holds
(:meth:`MasterRole.close`).  Each pair ``assign`` refuses is logged (task, pilot, reason; rate
limited), and the rounds' phase timings ride the next ``sync`` to the Task Queue's counters.  A
call refused as stale (another pilot holds the role) ends the role; a
call refused for its credential (revoked) ends the pilot.

The workers' messages are sealed with each worker's key for this master's epoch
(``agent.messages``, ``tq.client.pilotkeys``): a message that is not, or that replays a nonce or
falls outside the time window, is ignored, so no pilot speaks for another.  The keys come with the
claim's answer and, for pilots met later, with ``sync`` (a message from a pilot whose key has not
come yet waits for it); ``sync`` also names the roster's pilots the Task Queue no longer has
(revoked, gone), which the master drops and tells to leave (``end``).

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
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from glidein_ext.agent import messages
from glidein_ext.dht import wire
from glidein_ext.dht.node import DhtNode
from glidein_ext.dht.protocol import BODY_BUDGET
from glidein_ext.dht.replay import ReplayGuard, Verdict
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
from glidein_ext.sched.matrix import RankMatrix
from glidein_ext.sched.ranking import InputFile, TaskEntry, TaskSpec
from glidein_ext.sched.rounds import Report, RoundBook
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
    Refused,
    RoundReport,
    SiteAssign,
    SiteCompletion,
    SitePilot,
    SiteSync,
    TaskAssignment,
    TaskOffer,
)

T = TypeVar("T")
log = logging.getLogger("glidein_ext.agent.master")
TASKLIST_BUDGET = BODY_BUDGET - 256  # the broadcast's own fields
REPLY_BUDGET = int(BODY_BUDGET * 0.85)  # the aggregated replies, in one datagram at the root
TOPIC = "tasklist"
REPLAY_WINDOW = 60.0  # seconds a sealed message's time may differ from ours (the DHT's window)
HELD_PER_PILOT = 4  # messages kept from a pilot whose key has not come yet (the latest)
HELD_PILOTS = 4096  # pilots whose messages wait for their key, at most
_REFUSED: Any = object()
# A round's phases, timed (the master's log and ``MasterRole.phase_totals``): the wait from the
# first event to the round (batching, and the end of the round before), the Task Queue's sync,
# the TaskList broadcast with its replies, reading the replies, solving the rank matrix (and the
# other method, for the counters), the Task Queue's assign, probing suspects; and handing the
# tasks out, which goes on beside the next round (timed when it ends).
BROADCAST_FLOOR = 0.5  # seconds: the shortest TaskList wait
BROADCAST_SAMPLES = 16  # recent broadcasts the wait is fitted to
PHASES = ("wait", "sync", "broadcast", "replies", "solve", "tq_assign", "hand_out", "probe")
CLOSE_TIMEOUT = 10.0  # seconds a leaving master gives its last round, hand-outs and sync
REFUSED_BURST = 20  # refused pairs logged one a line per REFUSED_PERIOD; the rest counted
REFUSED_PERIOD = 60.0


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
        method: str = DEFAULT_METHOD,
        broadcast_timeout: float = 2.0,
        on_step_down: Callable[[str], None] = lambda reason: None,
    ) -> None:
        self.node = node
        self.client = client
        self.site = site
        self.pilot_id = pilot_id
        self.epoch = epoch
        self.method = method
        self.broadcast_timeout = broadcast_timeout
        self.on_step_down = on_step_down
        self.book = RoundBook(
            pilot_id, window=window, period=period, heartbeat=heartbeat, now=time.monotonic()
        )
        self.rank_sums: list[float] = []  # one per round that assigned (reports, tests)
        self.active = True
        self._wake: asyncio.Event | None = None
        self._offers: dict[int, TaskOffer] = {}
        self.keys: dict[int, bytes] = {}  # each worker's key with this epoch
        self.guard = ReplayGuard(REPLAY_WINDOW)
        self._held: dict[int, list[tuple[str, messages.Envelope]]] = {}  # awaiting their key
        self._roster_checked = time.monotonic()
        self.timings: dict[str, float] = {}  # the last round's phases, seconds (PHASES)
        self.phase_totals = dict.fromkeys(PHASES, 0.0)  # over every round of the role
        self.timed_rounds = 0
        self._more = False  # the last sync left runnable tasks unasked for
        self._broadcasts: deque[float] = deque(maxlen=BROADCAST_SAMPLES)  # their durations
        self._handing: set[asyncio.Future[None]] = set()  # hand-outs in flight (owned here)
        self._closing = False  # the pilot leaves: a last sync, then the role ends
        self._closed_clean = False  # the last sync got through
        self._unsent_phases: dict[str, float] = {}  # phase seconds the Task Queue lacks
        self._refused_since = -REFUSED_PERIOD  # the refused pairs' log: its period's start,
        self._refused_logged = 0  # the lines logged in it,
        self._refused_quiet = 0  # and the pairs not logged
        self._ended: asyncio.Event | None = None  # set when :meth:`run` returns

    # --- the workers' messages (on the event loop) ----------------------------------------------

    def install(self, pilots: Sequence[SitePilot] = ()) -> None:
        """Take the messages of a master; ``pilots``: the site's live pilots at a takeover."""
        now = time.monotonic()
        for pilot in pilots:
            try:
                host, _, port = pilot.dht_address.rpartition(":")
                address = (host.strip("[]"), int(port))
            except ValueError:
                continue
            task = None
            if pilot.task_id is not None:
                task = (pilot.task_id, pilot.attempt or 0)
            if pilot.key:
                try:
                    self.keys[pilot.pilot_id] = bytes.fromhex(pilot.key)
                except ValueError:
                    log.warning("master: the Task Queue sent pilot %s a bad key", pilot.pilot_id)
            self.book.join(pilot.pilot_id, address, now, task)
        self.node.register_message(messages.HELLO, self._on_hello)
        self.node.register_message(messages.DONE, self._on_done)
        self.node.register_message(messages.BYE, self._on_bye)

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _on_hello(self, payload: Any, _sender: int, _address: Any) -> Any:
        return self._receive(messages.HELLO, payload)

    def _on_done(self, payload: Any, _sender: int, _address: Any) -> Any:
        return self._receive(messages.DONE, payload)

    def _on_bye(self, payload: Any, _sender: int, _address: Any) -> Any:
        return self._receive(messages.BYE, payload)

    def _receive(self, kind: str, payload: Any) -> Any:
        """A worker's sealed message: its sealed answer, ``"pending"`` (its key has not come:
        checked then), or None (not the master of the epoch it was sealed for, or refused)."""
        if not self.active:
            return None
        try:
            envelope = messages.unseal(payload, kind)
        except ValueError as exc:
            log.info("master: malformed %s: %s", kind, exc)
            return None
        if envelope.epoch != self.epoch:
            return None  # sealed for another master
        key = self.keys.get(envelope.pilot_id)
        if key is None:
            self._hold(kind, envelope)
            return messages.PENDING
        value = self._accept(kind, envelope, key)
        if value is _REFUSED:
            return None
        return messages.seal_answer(key, kind, envelope.nonce, value)

    def _hold(self, kind: str, envelope: messages.Envelope) -> None:
        held = self._held.get(envelope.pilot_id)
        if held is None:
            if len(self._held) >= HELD_PILOTS:
                return
            held = self._held[envelope.pilot_id] = []
        held.append((kind, envelope))
        del held[:-HELD_PER_PILOT]
        self.book.trigger(time.monotonic())  # a Task Queue call brings the key
        self._poke()

    def _accept(self, kind: str, envelope: messages.Envelope, key: bytes) -> Any:
        """Check a sealed message (key, nonce, time) and act on it; its answer, or _REFUSED."""
        pilot_id = envelope.pilot_id
        if not messages.authentic(key, kind, envelope):
            log.warning("master: a %s sealed as pilot %s is not: ignored", kind, pilot_id)
            return _REFUSED
        verdict = self.guard.check(pilot_id, envelope.nonce, envelope.stamp, time.time())
        if verdict is not Verdict.FRESH:
            log.warning("master: a %s of pilot %s is %s: ignored", kind, pilot_id, verdict.value)
            return _REFUSED
        try:
            return self._act(kind, pilot_id, envelope.body)
        except ValueError as exc:
            log.info("master: malformed %s of pilot %s: %s", kind, pilot_id, exc)
            return _REFUSED

    def _act(self, kind: str, pilot_id: int, body: Any) -> Any:
        """An authentic message of ``pilot_id``; ValueError if its body names another pilot."""
        if kind == messages.HELLO:
            hello = messages.decode_hello(body)
            if hello.pilot_id != pilot_id:
                raise ValueError(f"hello names pilot {hello.pilot_id}")
            task = (hello.task_id, hello.attempt) if hello.task_id else None
            self.book.join(pilot_id, hello.address, time.monotonic(), task)
            self._poke()
            return [self.epoch]
        if kind == messages.DONE:
            reporter, completion = messages.decode_done(body)
            if reporter != pilot_id:
                raise ValueError(f"done names pilot {reporter}")
            self.local_done(pilot_id, completion)
            if self.book.synced((completion.task_id, completion.attempt)):
                return messages.DONE_SYNCED  # the worker stops resending it
            return True
        if kind == messages.BYE:
            if body != [pilot_id]:
                raise ValueError("bye names another pilot")
            self.book.leave(pilot_id)
            return True
        raise ValueError(f"unknown message {kind!r}")

    def local_done(self, pilot_id: int, completion: Completion) -> None:
        """A completion, from a worker or from this pilot's own last task."""
        key = (completion.task_id, completion.attempt)
        if self.book.completed(pilot_id, key, completion, time.monotonic()):
            self._poke()

    def _asked(self, now: float) -> tuple[int, ...]:
        """The pilots the next ``sync`` asks about: those whose key has not come, and now and
        then (each ``heartbeat``) the whole roster (the Task Queue names those it no longer
        has)."""
        asked = set(self._held)
        if now - self._roster_checked >= self.book.heartbeat:
            self._roster_checked = now
            asked.update(self.book.workers)
        return tuple(sorted(asked))

    async def _learn(self, keys: Sequence[Any], gone: Sequence[int]) -> None:
        """The Task Queue's answer about the pilots asked: keys (their held messages are checked
        now), and pilots it no longer has (dropped, and told to leave)."""
        for item in keys:
            try:
                key = bytes.fromhex(item.key)
            except ValueError:
                continue
            self.keys[item.pilot_id] = key
            for kind, envelope in self._held.pop(item.pilot_id, []):
                self._accept(kind, envelope, key)
        ending = []
        for pilot_id in gone:
            self._held.pop(pilot_id, None)
            worker = self.book.workers.get(pilot_id)
            self.book.leave(pilot_id)
            known = self.keys.pop(pilot_id) if pilot_id in self.keys else None
            if worker is not None and known is not None:
                log.info("master: pilot %s is no live pilot of the site any more", pilot_id)
                ending.append(self._end(worker.address, pilot_id, known))
        if ending:
            await asyncio.gather(*ending)

    async def _end(self, address: tuple[str, int], pilot_id: int, key: bytes) -> None:
        body = ["the Task Queue no longer has this pilot"]
        payload = messages.seal(key, messages.END, pilot_id, self.epoch, body, time.time())
        try:
            await self.node.message(address, messages.END, payload, timeout=1.0)
        except DhtError:
            log.info("master: pilot %s did not answer its end", pilot_id)

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
                self.timed_rounds,
                ", ".join(f"{p} {self.phase_totals[p]:.1f} s" for p in PHASES),
            )
            for handing in list(self._handing):
                handing.cancel()
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
            except asyncio.TimeoutError:
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
        if self._handing:
            await asyncio.wait(list(self._handing), timeout=CLOSE_TIMEOUT / 2)
        for _ in range(3):
            report = self.book.take_report(time.monotonic())
            if not (report.completions or report.dead or report.release):
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

    async def _sync(self, report: Report, want: int) -> list[TaskOffer] | None:
        """One ``sync`` call; the offers, or None when it failed (the report is kept)."""
        call = SiteSync(
            pilot_id=self.pilot_id,
            epoch=self.epoch,
            completions=tuple(SiteCompletion(p, c) for p, c in report.completions),
            dead=report.dead,
            release=report.release,
            want=want,
            pilots=self._asked(time.monotonic()),
            phases=tuple((p, round(v, 6)) for p, v in self._unsent_phases.items() if v > 0),
        )
        try:
            answer = await self._tq(self.client.sync, self.site, call)
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
        self.book.reported()
        for phase, seconds in call.phases:  # the Task Queue has these (counted since)
            self._unsent_phases[phase] -= seconds
        if answer.keys or answer.gone:
            await self._learn(answer.keys, answer.gone)
        # More runnable than asked for: another round, if a worker is left idle (after this
        # round's assignment, see _round; a round for busy workers only costs a call).
        self._more = answer.queued > len(answer.tasks)
        if self._more and not want and self.book.idle():
            self.book.trigger(time.monotonic())
        return list(answer.tasks)

    def _lap(self, phase: str, since: float) -> float:
        """Time ``phase`` of this round from ``since``; now."""
        now = time.monotonic()
        self.timings[phase] = self.timings.get(phase, 0.0) + now - since
        return now

    async def _round(self, now: float) -> None:
        self.timings = {"wait": max(0.0, now - (self.book.first_event or now))}
        want = self.book.start_round(now)
        offers: list[TaskOffer] = []
        if want or self._held or self.book.call_due(now):
            got = await self._sync(self.book.take_report(now), want)
            if not self.active:
                return
            offers = got or []
        mark = self._lap("sync", now)
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
        wait = self._broadcast_wait()
        try:
            result = await self.node.broadcast(TOPIC, payload, timeout=wait)
        except DhtError as exc:
            log.error("master: the TaskList could not be broadcast: %s", exc)
            return
        # A timed-out broadcast counts as twice its wait: the next one waits longer.
        self._broadcasts.append(result.elapsed if result.complete else 2 * wait)
        mark = self._lap("broadcast", mark)
        replies = decode_replies(result.value, fitted)
        candidates = self.book.replies(replies)
        offered = offers[:fitted]
        mark = self._lap("replies", mark)
        if offered and candidates.pilots:
            await self._assign(offered, candidates, idle)
        if self._more and self.book.idle():
            self.book.trigger(time.monotonic())
        mark = time.monotonic()
        await self._probe_suspects()
        self._lap("probe", mark)
        idle_replies = sum(1 for reply in replies if reply.idle)
        self._account(len(offered), len(candidates.pilots), idle_replies, len(replies))
        if not result.complete:
            log.info("master: round %d: the broadcast timed out", self.book.round)

    def _broadcast_wait(self) -> float:
        """How long the root waits for the TaskList's replies: three times the recent
        broadcasts' 90th percentile, between ``BROADCAST_FLOOR`` and ``broadcast_timeout``.  One
        slow pilot (a busy process, a dead node not yet dropped) then holds a round up for a
        fraction of a second, not for the whole timeout, while a site whose broadcasts are slow
        gets the time they take; a pilot whose reply missed the round only waits for the next
        (and is probed after ``miss_limit`` rounds in a row)."""
        if not self._broadcasts:
            return self.broadcast_timeout
        ordered = sorted(self._broadcasts)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        return min(self.broadcast_timeout, max(BROADCAST_FLOOR, 3 * p90))

    def _account(self, offered: int, candidates: int, idle: int, replies: int) -> None:
        """The round's phases into the totals, and one log line."""
        self.timed_rounds += 1
        for phase, seconds in self.timings.items():
            self.phase_totals[phase] = self.phase_totals.get(phase, 0.0) + seconds
            self._unsent_phases[phase] = self._unsent_phases.get(phase, 0.0) + seconds
        log.info(
            "master: round %d: %d task(s) offered to %d candidate(s), %d idle of %d that "
            "answered; %s",
            self.book.round,
            offered,
            candidates,
            idle,
            replies,
            ", ".join(f"{p} {self.timings[p]:.3f} s" for p in PHASES if p in self.timings),
        )

    def _solve(self, matrix: RankMatrix) -> Any:
        try:
            return assign(matrix, self.method)
        except MissingDependencyError as exc:
            log.warning("master: %s; assigning with %s instead", exc, FALLBACK_METHOD)
            self.method = FALLBACK_METHOD
            return assign(matrix, FALLBACK_METHOD)

    def _solve_both(self, matrix: RankMatrix) -> tuple[Any, Any]:
        """The assignment, and the other method's on the same matrix (for the counters)."""
        result = self._solve(matrix)
        return result, self._compare(matrix, result.method)

    def _compare(self, matrix: RankMatrix, method: str) -> Any:
        """The other method on the same matrix, for the counters (None without scipy)."""
        try:
            return assign(matrix, other_method(method))
        except MissingDependencyError:
            return None

    async def _assign(self, offered: list[TaskOffer], candidates: Any, idle: int) -> None:
        matrix = RankMatrix.from_replies(
            list(range(len(offered))), list(candidates.ranks), candidates.truncated
        )
        mark = time.monotonic()
        # In a thread: a large matrix takes a while, and the node's event loop must go on.
        result, other = await self._tq(self._solve_both, matrix)
        pairs = tuple(
            Pair(offered[row].task_id, candidates.pilots[col]) for row, col in result.pairs
        )
        report = RoundReport(
            result.total,
            result.served,
            idle,
            len(offered),
            result.method,
            other.total if other is not None else 0.0,
            other.served if other is not None else 0,
        )
        call = SiteAssign(self.pilot_id, self.epoch, pairs, report)
        mark = self._lap("solve", mark)
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
            return
        self.rank_sums.append(result.total)
        if answer.refused:
            self.log_refused(answer.refused, time.monotonic())
        placed = [(p.task_id, p.pilot_id, p.attempt) for p in answer.accepted]
        self.book.assigned(placed, delivering=True)
        by_id = {offer.task_id: offer for offer in offered}
        self._lap("tq_assign", mark)
        # Handed out while the next round goes on: the book knows they are on their way.
        handing = asyncio.ensure_future(self._hand_out([(by_id[t], p, a) for t, p, a in placed]))
        self._handing.add(handing)
        handing.add_done_callback(self._handing.discard)

    def log_refused(self, refused: Sequence[Refused], now: float) -> None:
        """One line per pair the Task Queue refused (the task, the pilot, why), at most
        ``REFUSED_BURST`` lines per ``REFUSED_PERIOD``; the pairs past that are counted, and the
        count logged when the next period starts."""
        if now - self._refused_since >= REFUSED_PERIOD:
            if self._refused_quiet:
                log.info(
                    "master: %d more refused pair(s) in the last %.0f s, not logged",
                    self._refused_quiet,
                    now - self._refused_since,
                )
            self._refused_since = now
            self._refused_logged = 0
            self._refused_quiet = 0
        for item in refused:
            if self._refused_logged >= REFUSED_BURST:
                self._refused_quiet += 1
                continue
            self._refused_logged += 1
            log.info(
                "master: the Task Queue refused task %s for pilot %s: %s",
                item.task_id,
                item.pilot_id,
                item.reason,
            )

    async def _hand_out(self, items: list[tuple[TaskOffer, int, int]]) -> None:
        started = time.monotonic()
        await asyncio.gather(*(self._deliver(offer, p, a) for offer, p, a in items))
        seconds = time.monotonic() - started
        self.phase_totals["hand_out"] += seconds
        self._unsent_phases["hand_out"] = self._unsent_phases.get("hand_out", 0.0) + seconds
        log.info("master: %d task(s) handed out in %.3f s", len(items), seconds)

    async def _deliver(self, offer: TaskOffer, pilot_id: int, attempt: int) -> None:
        worker = self.book.workers.get(pilot_id)
        task = TaskAssignment(
            offer.task_id,
            attempt,
            offer.name,
            offer.command,
            offer.inputs,
            offer.outputs,
            offer.max_runtime,
            0,
            offer.request_cpus,
            offer.request_memory,
            offer.request_disk,
        )
        body = messages.encode_assign(self.epoch, task)
        key = self.keys.get(pilot_id)
        unanswered = False  # sent, and no answer came: the worker may have it
        for _ in range(3):
            if worker is None or key is None:
                break
            if worker.task != (offer.task_id, attempt):
                return  # it ran it already (its completion came): the first try got there
            payload = messages.seal(key, messages.ASSIGN, pilot_id, self.epoch, body, time.time())
            unanswered = True
            try:
                answer = await self.node.message(worker.address, messages.ASSIGN, payload)
                value = messages.open_answer(key, messages.ASSIGN, payload[2], answer)
            except DhtError:
                continue
            except ValueError:  # not the worker's answer (a forgery, or an old pilot)
                continue
            if value is True:
                self.book.delivered(pilot_id)
                return
            unanswered = False
            break  # refused: busy with another task, or it knows a newer master
        if unanswered:  # released, it could run twice: its next reply tells
            log.info(
                "master: pilot %s did not answer task %s's assignment", pilot_id, offer.task_id
            )
            self.book.unanswered(pilot_id)
            return
        log.info("master: task %s did not reach pilot %s; released", offer.task_id, pilot_id)
        self.book.undelivered(offer.task_id, pilot_id)

    async def _probe_suspects(self) -> None:
        """Ping the suspects, all at once (a dead one costs a timeout, not one each)."""
        suspects = self.book.suspects()
        if not suspects:
            return
        answers = await asyncio.gather(*(self.node.ping(w.address) for w in suspects))
        for worker, answer in zip(suspects, answers):
            if answer is None:
                log.info("master: pilot %s is dead", worker.pilot_id)
                self.book.dead(worker.pilot_id)
            else:
                self.book.alive(worker.pilot_id)

    def _step_down(self, reason: str) -> None:
        log.warning("master: pilot %s steps down: %s", self.pilot_id, reason)
        self.active = False
        self.on_step_down(reason)
