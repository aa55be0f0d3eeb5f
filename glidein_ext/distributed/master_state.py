"""The master pilot's rounds as a pure state machine (Delgado Peris 2014 §III.B-C), in the style
of dask/distributed's ``worker_state_machine``: :meth:`MasterState.handle` takes one event and
returns the instructions it leads to.  No I/O, no clock, no randomness: every event carries the
time (``now``: monotonic seconds; a message also the wall time its seal is checked against), and
the shell (``distributed.master.MasterRole`` over asyncio and the site's DHT; the simulator's
``sim.master.SiteMaster`` over simulated costs) carries the instructions out and feeds back
what came of them.  Sealing an outgoing message (its nonce is random) is the shell's: an
instruction names the key.

A round: a ``sync`` with the Task Queue (the completions, dead workers and tasks to release it
carries; the site's runnable tasks it brings), the TaskList broadcast over the site's DHT, the
workers' aggregated ranks, one global assignment (``sched.assign``), the Task Queue's
``assign``, and the hand-outs, which go on beside the next round.  A round whose idle workers
all finished a task with a successor needs neither ``sync`` nor TaskList; another may rank the
last ``sync``'s spares (``sched.stock``).  Rounds come when ``sched.rounds.RoundBook`` says
(events and a batching window, or a period), a call at least every heartbeat.  Workers that
miss rounds are probed; one that fails its probe and stays unheard for the grace is dead, and
the next call says so.  The workers' hello/done/bye messages pass ``distributed.door``; one
whose key has not come is held until a ``sync`` brings it.

Events (frozen dataclasses, each with ``now``: ``machine.StateEvent``):

- :class:`Installed`: the role starts, with the site's live pilots (a takeover);
- :class:`Started`: the rounds may begin;
- :class:`Tick`: the timer armed by :class:`ArmTimer` fired;
- :class:`SyncAnswered` / :class:`AssignAnswered`: the Task Queue answered a call;
- :class:`CallFailed`: a call failed: the master is stale, the pilot's credential is refused,
  or another error (what it carried is kept for the next call);
- :class:`BroadcastEnded` / :class:`BroadcastFailed`: the TaskList's broadcast and its
  aggregated replies;
- :class:`Solved`: the rank matrix's assignment (and the other method's, for the counters);
- :class:`HandOutEnded`: one try of a hand-out: taken, refused, or lost (no answer);
- :class:`ProbeEnded`: a suspect answered its probe, or not;
- :class:`MessageArrived`: a worker's sealed hello/done/bye (answered by :class:`Answer`);
- :class:`LocalDone`: a completion from this pilot's own task;
- :class:`Undelivered`: a task listed as this pilot's never reached it;
- :class:`Close`: the pilot leaves.

Instructions (frozen dataclasses):

- :class:`CallSync` (with the long poll's wait, 0: none) / :class:`CallAssign`: call the Task
  Queue, then feed its answer or the failure;
- :class:`Broadcast`: broadcast the TaskList payload, with the timeout for the replies;
- :class:`Solve`: solve the rank matrix (the product in a thread);
- :class:`Deliver`: hand a task out to a worker (sealed ``assign``);
- :class:`Probe`: ping a suspect;
- :class:`Send`: tell a worker to leave (``End``) / that the role is free (``Resign``);
- :class:`Answer`: the sealed answer to the message being handled (None: no answer);
- :class:`ArmTimer`: feed :class:`Tick` at ``at`` (replaces the timer armed before);
- :class:`LogRefused`: the pairs the Task Queue refused, for the rate-limited log;
- :class:`Log`: a line for the master's log;
- :class:`StepDown`: the role ends (another pilot holds it, or the credential is refused);
- :class:`Finished`: the role is over (``clean``: a leaving master's last sync got through).

Python 3.9, standard library only.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, Union

from glidein_ext.dht import wire
from glidein_ext.dht.protocol import BODY_BUDGET
from glidein_ext.distributed import codec as messages
from glidein_ext.distributed.door import Admitted, Decision, Door, Pending, Refused, Role
from glidein_ext.distributed.machine import Answer, Log, Probe, ProbeEnded, StateEvent, Tick
from glidein_ext.distributed.phases import RoundPhases
from glidein_ext.errors import MissingDependencyError
from glidein_ext.sched.assign import FALLBACK_METHOD, assign, other_method
from glidein_ext.sched.matrix import RankMatrix, in_order, rank_sum
from glidein_ext.sched.ranking import InputFile, TaskEntry, task_spec
from glidein_ext.sched.rounds import FULL_FRACTION, Candidates, Report, RoundBook, Worker
from glidein_ext.sched.stock import HasTaskId, OfferStock
from glidein_ext.sched.tasklist import (
    TaskList,
    decode_replies,
    encode_tasklist,
    fit_tasks,
    reply_limit,
)
from glidein_ext.tq.client.protocol import Pair, PilotKey, RoundReport, SitePilot, TaskOffer

TASKLIST_BUDGET = BODY_BUDGET - 256  # the broadcast's own fields
REPLY_BUDGET = int(BODY_BUDGET * 0.85)  # the aggregated replies, in one datagram at the root
CLOSE_TIMEOUT = 10.0  # seconds a leaving master gives its last round, hand-outs and sync
LAST_TRIES = 3  # a leaving master's last sync, tried this often,
LAST_PAUSE = 0.5  # this many seconds apart
HAND_OUT_TRIES = 3  # a hand-out's sends before it is given up
HELD_PER_PILOT = 4  # messages kept from a pilot whose key has not come yet (the latest)
HELD_PILOTS = 4096  # pilots whose messages wait for their key, at most
BROADCAST_FLOOR = 0.5  # seconds: the shortest TaskList wait
BROADCAST_SAMPLES = 16  # recent broadcasts the wait is fitted to

OfferT = TypeVar("OfferT", bound=HasTaskId)


# --- events ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Installed(StateEvent):
    pilots: tuple[SitePilot, ...] = ()  # the site's live pilots at a takeover, this one too


@dataclass(frozen=True)
class Started(StateEvent):
    address: tuple[str, int] | None = None  # the master's DHT address, for its TaskLists


@dataclass(frozen=True)
class SyncAnswered(StateEvent, Generic[OfferT]):
    call: int
    offers: tuple[OfferT, ...] = ()
    queued: int = 0  # runnable tasks of the site in all
    shared: frozenset[int] = frozenset()  # offers another site gets first: not kept
    keys: tuple[PilotKey, ...] = ()
    gone: tuple[int, ...] = ()
    seen: bool = False  # a long poll's answer: the Task Queue saw the master then
    wall: float = 0.0  # wall-clock seconds: the held messages' freshness, checked now


class Failure(enum.Enum):
    STALE = "stale"  # another pilot holds the role
    REFUSED = "refused"  # the pilot's credential (revoked: the Task Queue ended the pilot)
    ERROR = "error"  # anything else: kept for the next call


@dataclass(frozen=True)
class CallFailed(StateEvent):
    call: int
    failure: Failure
    reason: str


@dataclass(frozen=True)
class Accepted(Generic[OfferT]):
    """A pair the Task Queue accepted (``Placed``): the attempt, and the successors."""

    task_id: int
    pilot_id: int
    attempt: int
    successors: tuple[OfferT, ...] = ()
    more: bool = False
    needs: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class AssignAnswered(StateEvent, Generic[OfferT]):
    call: int
    accepted: tuple[Accepted[OfferT], ...] = ()
    refused: tuple[Any, ...] = ()  # each with task_id, pilot_id, reason


@dataclass(frozen=True)
class BroadcastEnded(StateEvent):
    value: Any  # the aggregated replies
    elapsed: float
    complete: bool


@dataclass(frozen=True)
class BroadcastFailed(StateEvent):
    reason: str


@dataclass(frozen=True)
class Solved(StateEvent):
    result: Any  # ``sched.assign``'s result
    other: Any = None  # the other method's, for the counters (None: not run)


class HandOut(enum.Enum):
    TAKEN = "taken"  # the worker answered True: it runs the task
    REFUSED = "refused"  # it answered otherwise (busy, or it knows a newer master)
    LOST = "lost"  # no answer (or not the worker's): tried again


@dataclass(frozen=True)
class HandOutEnded(StateEvent):
    handout: int
    outcome: HandOut


@dataclass(frozen=True)
class MessageArrived(StateEvent):
    wall: float  # wall-clock seconds: the seal's freshness
    kind: str
    payload: Any


@dataclass(frozen=True)
class LocalDone(StateEvent):
    pilot_id: int
    completion: Any


@dataclass(frozen=True)
class Undelivered(StateEvent):
    task_id: int
    pilot_id: int


@dataclass(frozen=True)
class Close(StateEvent):
    """The pilot leaves."""


Event = Union[
    Installed,
    Started,
    Tick,
    SyncAnswered[Any],
    CallFailed,
    AssignAnswered[Any],
    BroadcastEnded,
    BroadcastFailed,
    Solved,
    HandOutEnded,
    ProbeEnded,
    MessageArrived,
    LocalDone,
    Undelivered,
    Close,
]

# --- instructions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CallSync:
    call: int
    report: Report
    want: int
    wait: float  # a long poll's wait at the Task Queue (0: none)
    pilots: tuple[int, ...]  # the pilots it asks about (keys, or gone)
    phases: tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class CallAssign:
    call: int
    pairs: tuple[Pair, ...]
    report: RoundReport
    completions: tuple[tuple[int, Any], ...]  # (pilot, completion) a sync-less round carries


@dataclass(frozen=True)
class Broadcast:
    payload: Any  # the encoded TaskList
    timeout: float
    entries: tuple[TaskEntry, ...]  # the tasks it shows
    limit: int  # the ranks each idle worker may send


@dataclass(frozen=True)
class Solve:
    matrix: RankMatrix


@dataclass(frozen=True)
class Deliver(Generic[OfferT]):
    handout: int
    pilot_id: int
    address: tuple[str, int]
    key: bytes
    epoch: int
    offer: OfferT
    attempt: int


@dataclass(frozen=True)
class Send:
    """Send a worker a message sealed with its key: leave (``End``), or the role is free
    (``Resign``, with the successors in the order they claim)."""

    pilot_id: int
    address: tuple[str, int]
    key: bytes
    message: messages.End | messages.Resign


@dataclass(frozen=True)
class ArmTimer:
    at: float


@dataclass(frozen=True)
class LogRefused:
    refused: tuple[Any, ...]
    now: float


@dataclass(frozen=True)
class StepDown:
    reason: str


@dataclass(frozen=True)
class Finished:
    clean: bool


Instruction = Union[
    CallSync,
    CallAssign,
    Broadcast,
    Solve,
    Deliver[Any],
    Probe,
    Send,
    Answer,
    ArmTimer,
    LogRefused,
    Log,
    StepDown,
    Finished,
]


# --- helpers -----------------------------------------------------------------------------------


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


def entry_of(offer: TaskOffer) -> TaskEntry:
    """A Task Queue offer as a TaskList entry (``sched.ranking``)."""
    spec = task_spec(offer, tuple(sorted(offer.attributes.items())))
    return TaskEntry(offer.task_id, spec, tuple(InputFile(lfn) for lfn in offer.inputs))


class RoundSolver:
    """Assigns with ``method``, falling back to ``greedy`` for good when it cannot run (the
    shell runs it, in a thread: a large matrix takes a while)."""

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


def _exit_ok(completion: Any) -> bool:
    return bool(completion.exit_code == 0)


# --- the state machine -------------------------------------------------------------------------


@dataclass
class _Round(Generic[OfferT]):
    """The round under way."""

    start: float
    want: int
    stage: str = "sync"  # sync, broadcast, solve, assign
    direct: bool = False  # no sync, no TaskList (``OfferStock.direct``)
    done: Report | None = None  # the completions its assign carries (no sync)
    wait: float = 0.0  # its sync's long poll
    mark: float = 0.0  # the current phase's start
    offers: list[OfferT] = field(default_factory=list)
    own: list[tuple[OfferT, int]] = field(default_factory=list)
    offered: list[OfferT] = field(default_factory=list)
    fitted: int = 0
    idle: int = 0
    timeout: float = 0.0
    complete: bool = True
    replies: int = 0
    idle_replies: int = 0
    candidates: Candidates = field(default_factory=lambda: Candidates((), (), ()))
    pairs: tuple[Pair, ...] = ()
    placing: list[OfferT] = field(default_factory=list)
    called: float = 0.0
    report: RoundReport = field(default_factory=RoundReport)


@dataclass
class _Call:
    """A Task Queue call in flight: what for (round, call, last), what it carried."""

    number: int
    purpose: str
    report: Report = field(default_factory=Report)
    want: int = 0
    wait: float = 0.0
    phases: tuple[tuple[str, float], ...] = ()


@dataclass
class _HandOut(Generic[OfferT]):
    number: int
    batch: int
    offer: OfferT
    pilot_id: int
    attempt: int
    worker: Worker | None
    key: bytes | None
    tries: int = 0
    unanswered: bool = False  # sent, and no answer came: the worker may have it


class MasterState(Generic[OfferT]):
    """The master's state: its rounds (``sched.rounds``), offers (``sched.stock``), the
    workers' keys and held messages (``distributed.door``), hand-outs and probes in flight."""

    def __init__(
        self,
        pilot_id: int,
        epoch: int,
        *,
        window: float,
        period: float,
        heartbeat: float,
        now: float,
        entry: Callable[[OfferT], TaskEntry],
        address: tuple[str, int] = ("", 0),
        grace: float = 0.0,
        broadcast_timeout: float = 2.0,
        long_poll: bool = True,
        full_fraction: float = FULL_FRACTION,
        round_stock: bool = True,
        batch_calls: bool = False,
        succeeded: Callable[[Any], bool] = _exit_ok,
    ) -> None:
        """``entry``: an offer as a TaskList entry; ``address``: the master's, in the TaskList
        (or with :class:`Started`); ``round_stock``: rounds from successors and spares
        (``sched.stock``); ``batch_calls``: a call waits for a round due within one window;
        ``succeeded``: whether a completion is a success."""
        self.pilot_id = pilot_id
        self.epoch = epoch
        self.address = address
        self._entry = entry
        self._succeeded = succeeded
        self.round_stock = round_stock
        self.batch_calls = batch_calls
        self.book = RoundBook(
            pilot_id,
            window=window,
            period=period,
            heartbeat=heartbeat,
            grace=grace,
            full_fraction=full_fraction,
            long_poll=long_poll,
            now=now,
        )
        self.stock: OfferStock[OfferT] = OfferStock(spare=heartbeat)  # successors, spares
        self.phases = RoundPhases()
        self.waits = BroadcastWait(broadcast_timeout)
        self.door = Door(Role.MASTER, 0, epoch=epoch)  # every message's checks, and the keys
        self.held: dict[int, list[Pending]] = {}  # messages awaiting their sender's key
        self.rank_sums: list[float] = []  # one per round that assigned (reports, tests)
        self.active = True  # the role holds
        self.clean = False  # a leaving master's last sync got through
        self.probing: dict[int, tuple[str, int]] = {}  # probes in flight
        self.handouts: dict[int, _HandOut[OfferT]] = {}  # hand-outs in flight
        self._batches: dict[int, list[float]] = {}  # a round's hand-outs: started, left, all
        self._numbers = 0
        self._started = False
        self._closing = False
        self._resign = False  # a leaving master whose rounds ran tells its successors
        self._more = False  # the last sync left runnable tasks unasked for
        self._woken = False
        self._roster_checked = now
        self._round: _Round[OfferT] | None = None
        self._call: _Call | None = None
        self._open_poll: int | None = None  # a long poll given up, not answered yet
        self._last = 0  # a leaving master's last syncs tried
        self._pause_until: float | None = None  # a leaving master waits (hand-outs, a retry)
        self._handouts_waited = False  # for its hand-outs, once

    # --- queries -------------------------------------------------------------------------------

    def busy(self) -> bool:
        """Whether the site has work: runnable tasks at the Task Queue (its last answer, less
        those placed since), tasks running at workers, completions not synced yet, or messages
        held for their sender's key.  A master of such a site is not idle."""
        return bool(
            self.book.runnable > 0
            or self.book.idle_count() < len(self.book.workers)  # a worker runs a task
            or self.book.pending()
            or self.held
        )

    @property
    def keys(self) -> dict[int, bytes]:
        """Each worker's key with this epoch."""
        return self.door.keys

    # --- events --------------------------------------------------------------------------------

    def handle(self, event: Event) -> list[Instruction]:
        """Take one event; the instructions it leads to, in order."""
        out: list[Instruction] = []
        if isinstance(event, MessageArrived):
            out.append(Answer(self._receive(event, out)))
        elif isinstance(event, LocalDone):
            self._local_done(event.pilot_id, event.completion, event.now)
        elif isinstance(event, Installed):
            self._install(event, out)
        elif isinstance(event, Undelivered):
            self.book.undelivered(event.task_id, event.pilot_id)
        elif isinstance(event, ProbeEnded):
            self._probed(event, out)
        elif isinstance(event, HandOutEnded):
            self._handed(event, out)
        elif not self.active:
            return out
        elif isinstance(event, Started):
            if event.address is not None:
                self.address = event.address
            self._started = True
            self._resign = True
            self._woken = True
        elif isinstance(event, Tick):
            if self._pause_until is not None and event.now >= self._pause_until:
                self._pause_until = None
            self._woken = self._woken or self._idle()
        elif isinstance(event, Close):
            self._closing = True
            self._woken = True
            if not self._started:
                self._started = True  # the last sync, without resigning (no rounds ran)
        elif isinstance(event, (SyncAnswered, CallFailed)):
            self._answered(event, out)
        elif isinstance(event, AssignAnswered):
            self._assigned(event, out)
        elif isinstance(event, (BroadcastEnded, BroadcastFailed)):
            self._broadcasted(event, out)
        elif isinstance(event, Solved):
            self._solved(event, out)
        self._go_on(event.now, out)
        return out

    def _poke(self) -> None:
        self._woken = True

    def _idle(self) -> bool:
        return self._round is None and self._call is None and self._pause_until is None

    def _go_on(self, now: float, out: list[Instruction]) -> None:
        """What the loop does next: a long poll an event woke the master in is given up (the
        Task Queue answers a resent completion as such; the next call ends the poll there);
        an idle master starts a round, a call, or its last sync, or arms its timer."""
        if not (self.active and self._started and self._woken):
            return
        call = self._call
        if call is not None and call.wait and call.purpose == "round":
            self._open_poll = call.number
            self._call = None
            self._round = None
            self.book.unreported(call.report)
        if not self._idle():
            return
        self._woken = False
        if self._closing:
            self._close_step(now, out)
        elif self.book.round_due(now):
            self._start_round(now, out)
        elif self.book.call_due(now) and not self._round_coming(now):
            self._sync(self.book.take_report(now), 0, 0.0, "call", now, out)
        else:
            out.append(ArmTimer(now + max(self.book.next_wakeup(now), 0.01)))

    def _round_coming(self, now: float) -> bool:
        """``batch_calls``: a round due within one window carries what the call would."""
        return self.batch_calls and self.book.next_wakeup(now) <= self.book.window

    def _end_step(self) -> None:
        """The round or call under way is over: the loop looks again."""
        self._round = None
        self._call = None
        self._woken = True

    # --- the workers' messages -----------------------------------------------------------------

    def _install(self, event: Installed, out: list[Instruction]) -> None:
        for pilot in event.pilots:
            if pilot.pilot_id == self.pilot_id:
                continue  # its own listed task: the worker's (``lost_own_task``)
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
                    self.door.learn_key(pilot.pilot_id, bytes.fromhex(pilot.key))
                except ValueError:
                    message = f"master: the Task Queue sent pilot {pilot.pilot_id} a bad key"
                    out.append(Log(logging.WARNING, message))
            self.book.join(pilot.pilot_id, address, event.now, task)
            self._poke()  # a worker joined (the rounds look at it once they run)

    def _receive(self, event: MessageArrived, out: list[Instruction]) -> Any:
        """A worker's sealed message through the door: its sealed answer, ``"pending"`` (its
        key has not come: checked then), or None (refused, or not the master of the epoch it
        was sealed for, or the role is over)."""
        if not self.active:
            return None
        decision = self.door.admit(event.kind, event.payload, event.wall)
        if isinstance(decision, Pending):
            self._hold(decision, event.now)
            return messages.PENDING
        admitted, value = self._act(decision, event.now, out)
        return decision.answer(value) if admitted and isinstance(decision, Admitted) else None

    def _hold(self, pending: Pending, now: float) -> None:
        pilot_id = pending.envelope.pilot_id
        held = self.held.get(pilot_id)
        if held is None:
            if len(self.held) >= HELD_PILOTS:
                return
            held = self.held[pilot_id] = []
        held.append(pending)
        del held[:-HELD_PER_PILOT]
        self.book.trigger(now)  # a Task Queue call brings the key
        self._poke()

    def _act(self, decision: Decision, now: float, out: list[Instruction]) -> tuple[bool, Any]:
        """Act on a message the door let in: (whether it was, its answer's value)."""
        if isinstance(decision, Refused):
            if not decision.quiet:
                out.append(
                    Log(logging.WARNING, f"master: a {decision.kind} refused: {decision.reason}")
                )
            return False, None
        if not isinstance(decision, Admitted):
            return False, None
        pilot_id, message = decision.pilot_id, decision.message
        if isinstance(message, messages.Hello):
            task = (message.task_id, message.attempt) if message.task_id else None
            self.book.join(pilot_id, message.address, now, task)
            self._poke()
            return True, [self.epoch]
        if isinstance(message, messages.Done):
            completion = message.completion
            self._local_done(pilot_id, completion, now)
            if self.book.synced((completion.task_id, completion.attempt)):
                return True, messages.DONE_SYNCED  # the worker stops resending it
            return True, True
        if isinstance(message, messages.Bye):
            self.book.leave(pilot_id)
            return True, True
        return False, None

    def _local_done(self, pilot_id: int, completion: Any, now: float) -> None:
        """A completion, from a worker or from this pilot's own last task."""
        key = (completion.task_id, completion.attempt)
        held = {key[0] for key, _, _ in self.book.pending()}  # completions the master holds
        quiet = self._succeeded(completion) and self.stock.quiet(completion.task_id, pilot_id, held)
        new = self.book.completed(pilot_id, key, completion, now, quiet)
        if new and not self.book.deferred(key):  # a quiet one waits for the next call
            self._poke()

    def asked(self, now: float) -> tuple[int, ...]:
        """The pilots the next ``sync`` asks about: those whose key has not come, and each
        heartbeat the whole roster (the Task Queue names those it no longer has)."""
        asked = set(self.held)
        if now - self._roster_checked >= self.book.heartbeat:
            self._roster_checked = now
            asked.update(self.book.workers)
        return tuple(sorted(asked))

    def learn(
        self, keys: Sequence[PilotKey], gone: Sequence[int], wall: float, out: list[Instruction]
    ) -> None:
        """The Task Queue's answer about the pilots asked: keys (their held messages are
        checked now), and pilots it no longer has (dropped, and told to leave)."""
        now = self.book.now
        for item in keys:
            try:
                key = bytes.fromhex(item.key)
            except ValueError:
                continue
            self.door.learn_key(item.pilot_id, key)
            for pending in self.held.pop(item.pilot_id, []):
                self._act(self.door.held(pending, wall), now, out)
        for pilot_id in gone:
            self.held.pop(pilot_id, None)
            worker = self.book.workers.get(pilot_id)
            self.book.leave(pilot_id)
            known = self.door.forget_key(pilot_id)
            if worker is not None and known is not None:
                line = f"master: pilot {pilot_id} is no live pilot of the site any more"
                out.append(Log(logging.INFO, line))
                reason = "the Task Queue no longer has this pilot"
                out.append(Send(pilot_id, worker.address, known, messages.End(reason)))

    # --- Task Queue calls ----------------------------------------------------------------------

    def _number(self) -> int:
        self._numbers += 1
        return self._numbers

    def _sync(
        self,
        report: Report,
        want: int,
        wait: float,
        purpose: str,
        now: float,
        out: list[Instruction],
    ) -> None:
        for _, completion in report.completions:  # reported here: no successors from the stock
            self.stock.forget(completion.task_id)
        for task_id in report.release:
            self.stock.forget(task_id)
        call = _Call(self._number(), purpose, report, want, wait, self.phases.unsent())
        self._call = call
        out.append(CallSync(call.number, report, want, wait, self.asked(now), call.phases))

    def _answered(self, event: SyncAnswered[OfferT] | CallFailed, out: list[Instruction]) -> None:
        call = self._call
        if call is None or event.call != call.number:
            if event.call == self._open_poll:  # a poll given up: the Task Queue ended it
                self._open_poll = None
            return
        if call.purpose == "assign":
            if isinstance(event, CallFailed) and self._round is not None:
                self._assign_failed(self._round, event, out)
            return
        self._call = None
        now = event.now
        if isinstance(event, CallFailed):
            if not self._failed(event, call.report, out):
                return
            if call.purpose == "round":
                if call.wait:
                    self._end_step()  # the loop looks at it
                else:
                    self._offers([], None, call.wait, now, out)
            elif call.purpose == "last":
                self._last_failed(now, out)
            else:
                self._end_step()
            return
        self._synced(call, event, out)
        if call.purpose == "round":
            self._offers(list(event.offers), None, call.wait, now, out)
        elif call.purpose == "last":
            line = (
                f"master: pilot {self.pilot_id} leaves; its last sync carried "
                f"{len(call.report.completions)} completion(s)"
            )
            out.append(Log(logging.INFO, line))
            self._finish(True, out)
        else:
            self._end_step()

    def _failed(self, event: CallFailed, report: Report | None, out: list[Instruction]) -> bool:
        """A call failed; whether the role goes on (what it carried is kept)."""
        if event.failure is Failure.STALE:
            self._step_down(event.reason, out)
            return False
        if event.failure is Failure.REFUSED:
            self._step_down(f"the Task Queue refuses this pilot: {event.reason}", out)
            return False
        if report is not None:
            self.book.unreported(report)
        return True

    def _synced(self, call: _Call, answer: SyncAnswered[OfferT], out: list[Instruction]) -> None:
        now = answer.now
        self.book.reported(now if answer.seen else None)  # a poll the TQ saw the master end
        self.stock.round_ended(now)  # the Task Queue's offers are fresh now
        if call.want:  # kept for the next rounds, but those another site gets first
            self.stock.offered([o for o in answer.offers if o.task_id not in answer.shared], now)
        self.book.supply(answer.queued, call.wait > 0)  # nothing runnable: the site is dry
        self.phases.sent(call.phases)  # the Task Queue has these (counted since)
        if answer.keys or answer.gone:
            self.learn(answer.keys, answer.gone, answer.wall, out)
        # More runnable than asked for: another round, if a worker is left idle (after this
        # round's assignment; a round for busy workers only costs a call).
        self._more = answer.queued > len(answer.offers)
        if self._more and not call.want and self.book.any_idle():
            self.book.trigger(now)

    # --- a round -------------------------------------------------------------------------------

    def _stocked(self) -> bool:  # a round may go without a sync: it owes none
        return not (self.book.news or self.held)

    def _start_round(self, now: float, out: list[Instruction]) -> None:
        book = self.book
        self.phases.start(now - (book.first_event or now))
        want = book.start_round(now)
        r: _Round[OfferT] = _Round(now, want, mark=now)
        self._round = r
        direct = self._direct_pairs(want)
        if direct is not None:  # the successors the Task Queue named (``sched.stock``)
            r.direct = True
            r.idle = book.idle_count()
            pairs = tuple(Pair(offer.task_id, pilot) for offer, pilot in direct)
            report = RoundReport(0.0, 0, r.idle, len(pairs), "successor", 0.0, 0)
            r.done = book.take_completions(now)
            self._place(r, pairs, [offer for offer, _ in direct], report, now, out)
            return
        stocked = self.round_stock and want and self._stocked()
        spares = self.stock.spares(book.idle(), now) if stocked else None
        if spares is not None:  # the last sync's spares: no sync
            self._offers(spares, book.take_completions(now), 0.0, now, out)
        elif not (want or self.held or book.call_due(now)):
            self._offers([], None, 0.0, now, out)
        else:
            wait = book.poll_wait() if want and not self.held and book.long_poll else 0.0
            self._sync(book.take_report(now), want, wait, "round", now, out)

    def _direct_pairs(self, want: int) -> list[tuple[OfferT, int]] | None:
        """This round's pairs when it needs neither a ``sync`` nor a TaskList
        (``OfferStock.direct``); None otherwise."""
        if not self.round_stock:
            return None
        for (task_id, _), pilot, completion in self.book.pending():
            self.stock.completed(task_id, self._succeeded(completion), pilot)
        if not want or not self._stocked():
            return None
        return self.stock.direct(self.book.idle(), self.book.dry and self.book.long_poll)

    def _offers(
        self,
        offers: list[OfferT],
        done: Report | None,
        wait: float,
        now: float,
        out: list[Instruction],
    ) -> None:
        """The round's offers are known: the TaskList goes out."""
        r = self._round
        assert r is not None
        book = self.book
        r.done, r.wait = done, wait
        r.mark = self.phases.lap("wait" if wait else "sync", r.start, now)
        # The idle makers of successors get theirs; the others rank the rest (``sched.stock``).
        r.own = self.stock.mine(book.idle()) if self.round_stock else []
        r.offers = self.stock.others(offers, book.idle())
        entries = [self._entry(offer) for offer in r.offers]
        r.idle = book.idle_count()
        limit = reply_limit(r.idle, REPLY_BUDGET)

        def build(chosen: Sequence[TaskEntry]) -> Any:
            return encode_tasklist(
                TaskList(
                    round=book.round,
                    epoch=self.epoch,
                    master=self.pilot_id,
                    address=self.address,
                    successors=book.successors(),
                    limit=limit,
                    tasks=tuple(chosen),
                )
            )

        payload, r.fitted = fit_tasks(
            entries, build, lambda p: len(wire.encode(p)), TASKLIST_BUDGET
        )
        if r.fitted < len(entries):
            book.trigger(now)  # the rest in the next round
        r.timeout = self.waits.wait()
        r.stage = "broadcast"
        out.append(Broadcast(payload, r.timeout, tuple(entries[: r.fitted]), limit))

    def _broadcasted(self, event: BroadcastEnded | BroadcastFailed, out: list[Instruction]) -> None:
        r = self._round
        if r is None or r.stage != "broadcast":
            return
        now = event.now
        if isinstance(event, BroadcastFailed):
            line = f"master: the TaskList could not be broadcast: {event.reason}"
            out.append(Log(logging.ERROR, line))
            if r.done is not None:
                self.book.unreported(r.done)  # the next call carries them
            self._end_step()
            return
        self.waits.record(event.elapsed, event.complete, r.timeout)
        r.complete = event.complete
        mark = self.phases.lap("broadcast", r.mark, now)
        replies = decode_replies(event.value, r.fitted)
        r.replies = len(replies)
        r.idle_replies = sum(1 for reply in replies if reply.idle)
        r.candidates = self.book.replies(replies).without({pilot for _, pilot in r.own})
        r.offered = r.offers[: r.fitted]
        r.mark = self.phases.lap("replies", mark, now)
        if r.own or (r.offered and r.candidates.pilots):
            self._assign(r, now, out)
        else:
            if r.done is not None:  # the spares fit no idle worker: the next round syncs
                self.stock.refused()
                self.book.unreported(r.done)
            self._round_end(r, now, out)

    def _assign(self, r: _Round[OfferT], now: float, out: list[Instruction]) -> None:
        """The own successors' pairs (``OfferStock.mine``) and the ranked ones."""
        r.pairs = tuple(Pair(offer.task_id, pilot) for offer, pilot in r.own)
        if r.offered and r.candidates.pilots:
            matrix = RankMatrix.from_replies(
                list(range(len(r.offered))), in_order(r.candidates.ranks), r.candidates.truncated
            )
            r.stage = "solve"
            out.append(Solve(matrix))
            return
        report = RoundReport(0.0, 0, r.idle, len(r.own), "successor", 0.0, 0)
        mark = self.phases.lap("solve", r.mark, now)
        self._place(r, r.pairs, [*r.offered, *(o for o, _ in r.own)], report, mark, out)

    def _solved(self, event: Solved, out: list[Instruction]) -> None:
        r = self._round
        if r is None or r.stage != "solve":
            return
        result, other = event.result, event.other
        candidates = r.candidates
        pairs = r.pairs + tuple(
            Pair(r.offered[row].task_id, candidates.pilots[col]) for row, col in result.pairs
        )
        ranks = candidates.ranks  # the workers' own, not in_order's
        report = RoundReport(
            rank_sum(result.pairs, ranks),
            result.served,
            r.idle,
            len(r.offered),
            result.method,
            rank_sum(other.pairs, ranks) if other is not None else 0.0,
            other.served if other is not None else 0,
        )
        mark = self.phases.lap("solve", r.mark, event.now)
        self._place(r, pairs, [*r.offered, *(o for o, _ in r.own)], report, mark, out)

    def _place(
        self,
        r: _Round[OfferT],
        pairs: tuple[Pair, ...],
        placing: list[OfferT],
        report: RoundReport,
        mark: float,
        out: list[Instruction],
    ) -> None:
        """The round's ``assign``, with the completions it carries."""
        r.pairs, r.placing, r.mark, r.called = pairs, placing, mark, mark
        r.stage = "assign"
        completions = tuple(r.done.completions) if r.done is not None else ()
        call = _Call(self._number(), "assign")
        self._call = call
        r.report = report
        out.append(CallAssign(call.number, pairs, report, completions))

    def _assigned(self, event: AssignAnswered[OfferT], out: list[Instruction]) -> None:
        r, call = self._round, self._call
        if r is None or call is None or r.stage != "assign" or event.call != call.number:
            return
        self._call = None
        now = event.now
        if r.done is not None:
            self.book.reported(r.called)
        self.rank_sums.append(r.report.rank_sum)
        for item in event.accepted:
            self.stock.placed(item.task_id, item.successors, item.more, item.needs)
        if event.refused:  # another site took a task, say: no spare any more
            out.append(LogRefused(tuple(event.refused), now))
            self.stock.refused([item.task_id for item in event.refused])
        placed = [(item.task_id, item.pilot_id, item.attempt) for item in event.accepted]
        self.book.assigned(placed, delivering=True)
        self.book.took(len(placed), now)
        by_id = {offer.task_id: offer for offer in r.placing}
        self.phases.lap("tq_assign", r.mark, now)
        # Handed out while the next round goes on: the book knows they are on their way.
        self._hand_out([(by_id[t], p, a) for t, p, a in placed], now, out)
        self._after_place(r, now, out)

    def _assign_failed(self, r: _Round[OfferT], event: CallFailed, out: list[Instruction]) -> None:
        self._call = None
        if not self._failed(event, None, out):
            return
        # Its answer may be lost after the Task Queue placed the pairs: the master would believe
        # those pilots idle, the Task Queue busy, for ever.  Released by the next call (a sync).
        self.book.release(pair.task_id for pair in r.pairs)
        line = f"master: assign failed (its tasks released by the next sync): {event.reason}"
        out.append(Log(logging.WARNING, line))
        if r.done is not None:
            self.book.unreported(r.done)  # the next call carries them again
        self._after_place(r, event.now, out)

    def _after_place(self, r: _Round[OfferT], now: float, out: list[Instruction]) -> None:
        if r.direct:  # a round without a TaskList ranks nothing
            self.book.leftover(self.stock.round_ended(now), now)
            n = len(r.pairs)
            out.append(Log(logging.INFO, self.phases.account(self.book.round, n, n, r.idle, 0)))
            self._end_step()
        else:
            self._round_end(r, now, out)

    def _round_end(self, r: _Round[OfferT], now: float, out: list[Instruction]) -> None:
        if self._more and self.book.any_idle():
            self.book.trigger(now)
        self._probe_suspects(out)
        self.phases.lap("probe", now, now)
        counts = (len(r.offered), len(r.candidates.pilots), r.idle_replies, r.replies)
        out.append(Log(logging.INFO, self.phases.account(self.book.round, *counts)))
        if not r.complete:
            out.append(
                Log(logging.INFO, f"master: round {self.book.round}: the broadcast timed out")
            )
        self._end_step()

    # --- hand-outs and probes (beside the rounds) ----------------------------------------------

    def _hand_out(
        self, items: list[tuple[OfferT, int, int]], now: float, out: list[Instruction]
    ) -> None:
        if not items:
            return
        batch = self._number()
        self._batches[batch] = [now, float(len(items)), float(len(items))]
        for offer, pilot_id, attempt in items:
            number = self._number()
            worker = self.book.workers.get(pilot_id)
            handout = _HandOut(
                number, batch, offer, pilot_id, attempt, worker, self.keys.get(pilot_id)
            )
            self.handouts[number] = handout
            self._try(handout, now, out)

    def _try(self, h: _HandOut[OfferT], now: float, out: list[Instruction]) -> None:
        """A hand-out's next send (at most ``HAND_OUT_TRIES``), or its end."""
        if h.tries >= HAND_OUT_TRIES or h.worker is None or h.key is None:
            self._give_up(h, now, out)
        elif h.worker.task != (h.offer.task_id, h.attempt):
            self._handout_over(h, now, out)  # it ran it already (its completion came)
        else:
            h.tries += 1
            h.unanswered = True
            out.append(
                Deliver(
                    h.number, h.pilot_id, h.worker.address, h.key, self.epoch, h.offer, h.attempt
                )
            )

    def _handed(self, event: HandOutEnded, out: list[Instruction]) -> None:
        h = self.handouts.get(event.handout)
        if h is None:
            return
        if event.outcome is HandOut.TAKEN:
            self.book.delivered(h.pilot_id)
            self._handout_over(h, event.now, out)
        elif event.outcome is HandOut.REFUSED:  # busy with another task, or a newer master
            h.unanswered = False
            self._give_up(h, event.now, out)
        else:
            self._try(h, event.now, out)

    def _give_up(self, h: _HandOut[OfferT], now: float, out: list[Instruction]) -> None:
        task_id = h.offer.task_id
        if h.unanswered:  # released, it could run twice: its next reply tells
            line = f"master: pilot {h.pilot_id} did not answer task {task_id}'s assignment"
            self.book.unanswered(h.pilot_id)
        else:
            line = f"master: task {task_id} did not reach pilot {h.pilot_id}; released"
            self.book.undelivered(task_id, h.pilot_id)
        out.append(Log(logging.INFO, line))
        self._handout_over(h, now, out)

    def _handout_over(self, h: _HandOut[OfferT], now: float, out: list[Instruction]) -> None:
        del self.handouts[h.number]
        batch = self._batches[h.batch]
        batch[1] -= 1
        if batch[1] <= 0:
            del self._batches[h.batch]
            seconds = now - batch[0]
            self.phases.add("hand_out", seconds)
            line = f"master: {int(batch[2])} task(s) handed out in {seconds:.3f} s"
            out.append(Log(logging.INFO, line))
        if self._pause_until is not None and self._handouts_waited and not self.handouts:
            self._pause_until = None  # the leaving master's hand-outs ended
            self._woken = True

    def _probe_suspects(self, out: list[Instruction]) -> None:
        """Probe the suspects not being probed already: a round does not wait for them, and a
        worker is dead only once a probe failed and it was unheard for the book's grace."""
        for worker in self.book.suspects():
            if worker.pilot_id not in self.probing:
                self.probing[worker.pilot_id] = worker.address
                out.append(Probe(worker.pilot_id, worker.address))

    def _probed(self, event: ProbeEnded, out: list[Instruction]) -> None:
        address = self.probing.pop(event.pilot_id, None)
        if address is None:
            return
        if event.answered:
            self.book.alive(event.pilot_id, event.now)
        elif self.book.probe_failed(event.pilot_id, event.now):
            out.append(Log(logging.INFO, f"master: pilot {event.pilot_id} is dead"))
            self._poke()  # reported in the next call: the Task Queue requeues its task
            key = self.keys.pop(event.pilot_id, None)
            if key is not None:  # a slow one that still hears leaves, rather than idle unseen
                reason = "the Task Queue no longer has this pilot"
                out.append(Send(event.pilot_id, address, key, messages.End(reason)))

    # --- the end -------------------------------------------------------------------------------

    def _close_step(self, now: float, out: list[Instruction]) -> None:
        """A leaving master: its hand-outs end (``CLOSE_TIMEOUT`` / 2 at most), then its last
        sync (tried ``LAST_TRIES`` times) carries what it holds: it loses no completion
        (Delgado Peris 2014 §III.B)."""
        if self.handouts and not self._handouts_waited:
            self._handouts_waited = True
            self._pause_until = now + CLOSE_TIMEOUT / 2
            out.append(ArmTimer(self._pause_until))
            return
        if self._last >= LAST_TRIES:
            self._finish(False, out)
            return
        self._last += 1
        report = self.book.take_report(now)
        if self._open_poll is None and not (report.completions or report.dead or report.release):
            self._finish(True, out)
            return
        self._sync(report, 0, 0.0, "last", now, out)

    def _last_failed(self, now: float, out: list[Instruction]) -> None:
        if self._last >= LAST_TRIES:
            self._finish(False, out)
            return
        self._pause_until = now + LAST_PAUSE
        out.append(ArmTimer(self._pause_until))

    def _step_down(self, reason: str, out: list[Instruction]) -> None:
        out.append(StepDown(reason))
        if self._closing:
            self._finish(False, out)
            return
        self.active = False
        self._round = None
        self._call = None
        out.append(Finished(False))

    def _finish(self, clean: bool, out: list[Instruction]) -> None:
        """The role ends; a master whose rounds ran tells its successors (the lowest ids,
        Delgado Peris 2014 §III.B) that the role is free: the first claims at once."""
        self.active = False
        self.clean = clean
        self._round = None
        self._call = None
        if self._resign:
            successors = self.book.successors()
            for pilot_id, address in successors:
                key = self.keys.get(pilot_id)
                if key is not None:
                    out.append(Send(pilot_id, address, key, messages.Resign(successors)))
        out.append(Finished(clean))
