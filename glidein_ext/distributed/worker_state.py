"""A worker pilot of a distributed site as a state machine (Delgado Peris 2014 §III.B-C), pure:
events in, instructions out.

The asyncio shell (``distributed.worker``) delivers what happened and carries out what this core
says; the core does no I/O, reads no clock (each event carries ``now``, the monotonic time, as
its first field, ``machine.StateEvent``; a message its ``wall``, the wall-clock time its seal is
checked against) and draws no random number.
Its state: the master it knows and when to probe or claim (``sched.election.Succession``), its
door (``distributed.door``: a master of an older epoch than the newest it knew is not obeyed),
the task it runs or reports, the last tasks it finished (a resent assignment of one is answered,
never run twice), and the completions no master has said the Task Queue has
(``sched.outbox``).

Events (what the shell tells it):

==================  ==========================================================================
``Heard``           a TaskList of a master came (its view, its succession list)
``Arrived``         a master's sealed message to this pilot: assign, end or resign
``EndChecked``      the Task Queue's word on an ``end``: whether it still has this pilot
``Named``           the Task Queue named the master (registration, a refused claim)
``Greeted``         a master answered (or not) this pilot's hello
``Acked``           a master answered a completion (``None``: not the master; ``"pending"``;
                    True: it holds it; ``"synced"``: the Task Queue has it), or no answer came
``Ended``           this pilot's task ended: its completion is to be reported
``GaveBack``        this pilot's task was given back unrun (evicted: not the task's fault)
``Tick``            the election's timer
``ProbeEnded``      the silent master answered its probe, or not
``ClaimAnswered``   the Task Queue granted the role, named another master, refused, or the
                    call failed (one claim is on its way at a time)
==================  ==========================================================================

Instructions (what the shell does):

==================  ==========================================================================
``Answer``          the value a message handler returns (sealed by the door's key)
``Run``             queue this assignment for the pilot's thread
``Meet``            say hello to this master (then resend the completions, when ``resend``)
``SendDone``        send this completion (the ``Done`` message) to this master
``Rank``            answer the TaskList with this pilot's ranks (idle, room for a task)
``ReplyBusy``       answer the TaskList as busy with this task (0: idle but full)
``CheckEnd``        ask the Task Queue whether it still has this pilot (an ``end`` came, or
                    the master keeps holding its hello for a key it does not get)
``Probe``           ping the silent master
``Claim``           claim the master role, after pinging these lower-id successors
``BecomeMaster``    take the role of this epoch, with the completions no master synced
``OwnDone``         hand this pilot's completion to its own master role
``Leave``           the pilot stops (the Task Queue no longer has it)
``Log``             one line for the worker's log
==================  ==========================================================================

Python 3.9, standard library only.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from glidein_ext.distributed import codec
from glidein_ext.distributed.door import Admitted, Door, Refused, Role
from glidein_ext.distributed.machine import Answer, Log, Probe, ProbeEnded, StateEvent, Tick
from glidein_ext.sched.election import Action, MasterView, Succession, lost_own_task
from glidein_ext.sched.outbox import Outbox
from glidein_ext.tq.client.protocol import Completion, TaskAssignment

Key = tuple[int, int]  # (task id, attempt)
Address = tuple[str, int]
RESEND_AFTER = 3.0  # seconds before a completion no master said the Task Queue has is resent
# Hellos in a row a master holds for this pilot's key before the pilot asks the Task Queue
# whether it still has it (a master gets no key for a pilot the Task Queue no longer has).
PENDING_CHECK = 3
FINISHED_KEPT = 16  # the last (task, attempt)s run: a late resend of one is acknowledged


# --- events ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Heard(StateEvent):
    master: MasterView
    successors: tuple[tuple[int, Address], ...]
    room: bool = True  # the pilot could start a task now (its startd has room)


@dataclass(frozen=True)
class Arrived(StateEvent):
    kind: str
    payload: Any
    wall: float
    can_run: bool = True  # the pilot's executor still takes tasks (its glidein is not retiring)


@dataclass(frozen=True)
class EndChecked(StateEvent):
    check: CheckEnd  # the check it answers
    gone: bool | None  # the Task Queue no longer has this pilot (None: it did not answer)


@dataclass(frozen=True)
class Named(StateEvent):
    master: MasterView | None


@dataclass(frozen=True)
class Greeted(StateEvent):
    meet: Meet  # the hello it answers
    answer: Any  # None: not the master (any more)


@dataclass(frozen=True)
class Acked(StateEvent):
    key: Key
    answer: Any  # None, "pending", True, "synced"; NO_ANSWER when none came


NO_ANSWER: Any = object()


@dataclass(frozen=True)
class Ended(StateEvent):
    completion: Completion


@dataclass(frozen=True)
class GaveBack(StateEvent):
    key: Key


@dataclass(frozen=True)
class ClaimAnswered(StateEvent):
    granted: bool
    master: MasterView | None  # the master the Task Queue names (this pilot when granted)
    pilots: Sequence[Any]  # the site's live pilots (a granted claim)
    lost: str = ""  # the Task Queue forgot or refuses this pilot: it leaves


Event = Union[
    Heard,
    Arrived,
    EndChecked,
    Named,
    Greeted,
    Acked,
    Ended,
    GaveBack,
    Tick,
    ProbeEnded,
    ClaimAnswered,
]


# --- instructions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    task: TaskAssignment


@dataclass(frozen=True)
class Meet:
    master: MasterView
    hello: codec.Hello
    resend: bool = True


@dataclass(frozen=True)
class SendDone:
    master: MasterView
    done: codec.Done  # this pilot's completion, as the message

    @property
    def key(self) -> Key:
        completion = self.done.completion
        return (completion.task_id, completion.attempt)


@dataclass(frozen=True)
class Rank:
    last_done: int


@dataclass(frozen=True)
class ReplyBusy:
    task_id: int  # 0: idle but without room for a task
    last_done: int


@dataclass(frozen=True)
class CheckEnd:
    epoch: int
    reason: str


@dataclass(frozen=True)
class Claim:
    lower: tuple[tuple[int, Address | None], ...]  # lower-id successors, their addresses


@dataclass(frozen=True)
class BecomeMaster:
    epoch: int
    pilots: Sequence[Any]
    unsynced: tuple[tuple[Key, Completion], ...]
    lost: int | None  # listed as this pilot's task, never received: to release


@dataclass(frozen=True)
class OwnDone:
    completion: Completion  # this pilot's completion, for its own master role


@dataclass(frozen=True)
class Leave:
    reason: str


Instruction = Union[
    Answer,
    Run,
    Meet,
    SendDone,
    Rank,
    ReplyBusy,
    CheckEnd,
    Probe,
    Claim,
    BecomeMaster,
    OwnDone,
    Leave,
    Log,
]


# --- the state ------------------------------------------------------------------------------------


@dataclass
class WorkerState:
    """One pilot's part in its site's distributed scheduling."""

    pilot_id: int
    key: bytes  # the pilot's key from its registration (each epoch's derives from it)
    address: Address  # its DHT node's
    silence: float  # a master is probed after this long unheard
    stagger: float = 2.0  # the k-th successor claims k staggers after the master's death
    patience: float = 30.0  # a pilot outside the succession list claims after this long
    now: float = 0.0
    resend_after: float = RESEND_AFTER
    current: Key | None = None  # the task it runs or reports
    last_done: int = 0
    master_here: bool = False  # this pilot holds the master role
    stopping: bool = False
    addresses: dict[int, Address] = field(default_factory=dict)  # successors' DHT addresses
    finished: deque[Key] = field(default_factory=lambda: deque(maxlen=FINISHED_KEPT))
    reported: set[Key] = field(default_factory=set)  # acknowledged, not yet finished

    def __post_init__(self) -> None:
        self.succession = Succession(
            self.pilot_id,
            silence=self.silence,
            stagger=self.stagger,
            patience=self.patience,
            now=self.now,
        )
        self.door = Door(Role.WORKER, self.pilot_id, key=self.key)
        self.outbox = Outbox(self.resend_after)
        self._met = 0  # the newest epoch whose master answered this pilot's hello
        self._greeted_at = -math.inf
        self._pending = 0  # hellos in a row the master held for a key it has not
        self._claiming = False  # a claim is on its way to the Task Queue (one at a time)
        self._recheck: tuple[float, CheckEnd] | None = None  # a check to ask again, and when
        self._idle_since: float | None = None  # ranking offered tasks, given none, since

    @property
    def master(self) -> MasterView | None:
        return self.succession.master

    @property
    def busy(self) -> bool:
        return self.current is not None or self.master_here

    def handle(self, event: Event) -> list[Instruction]:
        """What to do about ``event``."""
        handler = _HANDLERS[type(event)]
        out: list[Instruction] = handler(self, event)
        return out

    # --- the master ---------------------------------------------------------------------------

    def _know(self, master: MasterView, now: float, successors: Sequence[int] | None) -> bool:
        if not self.succession.heard(master, now, successors):
            return False
        self.door.know_epoch(master.epoch)  # its elders are obeyed no more
        return True

    def _hello(self) -> codec.Hello:
        task, attempt = self.current or (0, 0)
        return codec.Hello(self.pilot_id, self.address, task, attempt)

    def _meet(self, master: MasterView, now: float, resend: bool = True) -> list[Instruction]:
        if master.pilot_id == self.pilot_id:
            return []
        self._greeted_at = now
        return [Meet(master, self._hello(), resend)]

    def _on_heard(self, event: Heard) -> list[Instruction]:
        known = self.master
        successors = [pilot for pilot, _ in event.successors]
        if not self._know(event.master, event.now, successors):
            return [Answer(None)]  # a stale master's TaskList
        self.addresses.update(dict(event.successors))
        out: list[Instruction] = []
        if known is None or known.epoch != event.master.epoch:
            out += self._meet(event.master, event.now)
        elif self._met < event.master.epoch and event.now - self._greeted_at >= self.resend_after:
            # Its hello (or the answer) was lost: a master ignores the replies of a pilot it
            # never met, so the worker greets it again until it answers.
            out += self._meet(event.master, event.now)
        else:
            out += self._sends(self.outbox.due(event.now), event.now)
        if self.busy:
            task_id = self.current[0] if self.current is not None else -1
            return [*out, ReplyBusy(task_id, self.last_done)]
        if not event.room:
            return [*out, ReplyBusy(0, self.last_done)]
        if not any(isinstance(i, Meet) for i in out):
            out += self._unseen(event.master, event.now)
        return [*out, Rank(self.last_done)]

    def _unseen(self, master: MasterView, now: float) -> list[Instruction]:
        """An idle worker given no task for ``silence`` seconds may be unknown to its master
        (which ignores the replies of a pilot it does not know: it found it dead, or no longer
        has its key, and its ``end`` was lost): it greets the master again, once a
        ``silence``.  A master that has it answers; one that has no key for it holds the hello,
        and the pilot then asks the Task Queue whether it still has it."""
        if self._idle_since is None:
            self._idle_since = now
            return []
        if now - self._idle_since < self.silence:
            return []
        self._idle_since = now
        return self._meet(master, now, resend=False)

    def _on_named(self, event: Named) -> list[Instruction]:
        self.succession.adopt(event.master, event.now)
        if event.master is None:
            return []
        self.door.know_epoch(event.master.epoch)
        return self._meet(event.master, event.now)

    def _on_greeted(self, event: Greeted) -> list[Instruction]:
        if event.answer is None:
            self.succession.forget(event.now)
            return []
        epoch = event.meet.master.epoch
        out = self._held(event.answer, epoch)
        if event.answer != codec.PENDING:
            self._met = max(self._met, epoch)
        resend = event.meet.resend
        return out + (self._sends(self.outbox.everything(), event.now) if resend else [])

    def _held(self, answer: Any, epoch: int) -> list[Instruction]:
        """A master's answer: ``"pending"`` (held until it has this pilot's key) too often in a
        row, and the pilot asks the Task Queue whether it still has it (a master gets no key
        for a pilot the Task Queue no longer has, and its ``end`` may have been lost)."""
        if answer != codec.PENDING:
            self._pending = 0
            return []
        self._pending += 1
        if self._pending < PENDING_CHECK:
            return []
        self._pending = 0
        return [CheckEnd(epoch, "the master has no key for this pilot")]

    # --- a master's messages ------------------------------------------------------------------

    def _on_arrived(self, event: Arrived) -> list[Instruction]:
        decision = self.door.admit(event.kind, event.payload, event.wall)
        if not isinstance(decision, Admitted):
            reason = decision.reason if isinstance(decision, Refused) else "pending"
            line = f"pilot {self.pilot_id}: a {event.kind} refused: {reason}"
            return [Answer(False), Log(logging.WARNING, line)]
        message = decision.message
        if isinstance(message, codec.Assign):
            taken, out = self._take(message.task, event.can_run)
            return [Answer(decision.answer(taken)), *out]
        if isinstance(message, codec.End):
            # Checked with the Task Queue before it is obeyed: the master may be wrong (it found
            # a slow pilot dead) or no master any more without knowing it.
            return [Answer(decision.answer(True)), CheckEnd(decision.epoch, message.reason)]
        if isinstance(message, codec.Resign):
            return [Answer(decision.answer(True)), *self._resigned(decision.epoch, message, event)]
        return [Answer(False)]

    def _take(self, task: TaskAssignment, can_run: bool) -> tuple[bool, list[Instruction]]:
        key = (task.task_id, task.attempt)
        if key in self.finished:
            return True, []  # a resend of one it ran already
        if self.current is not None:
            return self.current == key, []  # a resend is fine
        if self.stopping or self.master_here or not can_run:
            return False, []
        self.current = key
        self._idle_since = None
        return True, [Run(task)]

    def _resigned(self, epoch: int, message: codec.Resign, event: Arrived) -> list[Instruction]:
        """The master leaves (its last sync made): the election starts now, the first successor
        claiming at once (the Task Queue grants it once the master deregistered)."""
        known = self.master
        if known is None or known.epoch != epoch:
            return []
        # Its order may be news: a pilot that joined after the last TaskList knew none.
        self.addresses.update(dict(message.successors))
        ids = [pilot for pilot, _ in message.successors]
        self.succession.forget(event.now, ids if ids else None)
        return [Log(logging.INFO, f"pilot {self.pilot_id}: the master of epoch {epoch} leaves")]

    def _on_end_checked(self, event: EndChecked) -> list[Instruction]:
        check = event.check
        who = f"pilot {self.pilot_id}: {check.reason} (the master of epoch {check.epoch})"
        if event.gone is None:  # asked again soon: the master that told it may not tell again
            self._recheck = (event.now + self.resend_after, check)
            return []
        self._recheck = None
        if event.gone:
            return [
                Log(logging.WARNING, f"{who}; the Task Queue agrees: leaving"),
                Leave(check.reason),
            ]
        return [Log(logging.WARNING, f"{who}; the Task Queue still has this pilot: it stays")]

    # --- this pilot's task --------------------------------------------------------------------

    def _on_ended(self, event: Ended) -> list[Instruction]:
        """The task ended (called again while it is not acknowledged: a retry)."""
        completion = event.completion
        key = (completion.task_id, completion.attempt)
        if key in self.reported:
            return []
        if self.master_here:
            self.reported.add(key)
            return [OwnDone(completion)]
        if key not in self.outbox:  # before it is sent: a new master met meanwhile gets it
            self.outbox.add(key, completion, event.now)
        return self._sends([(key, completion)], event.now)

    def acknowledged(self, key: Key) -> bool:
        """Whether a master holds (or the Task Queue has) this pilot's completion of ``key``."""
        return key in self.reported

    def finish(self, key: Key) -> None:
        """The pilot's thread is done with ``key``: idle again."""
        self.reported.discard(key)
        self.last_done = key[0]
        self.finished.append(key)
        if self.current == key:
            self.current = None

    def _on_gave_back(self, event: GaveBack) -> list[Instruction]:
        # Not the task's fault: no report.  The worker says it is idle without having finished
        # it, so the master releases it (the Task Queue requeues it).
        if self.current == event.key:
            self.current = None
        return [Log(logging.INFO, f"pilot {self.pilot_id}: task {event.key[0]} given back")]

    def resend(self, now: float) -> list[Instruction]:
        """Every completion no master said the Task Queue has, to the master (a leaving
        worker's last tries)."""
        return self._sends(self.outbox.everything(), now)

    def _sends(self, items: Sequence[tuple[Key, Completion]], now: float) -> list[Instruction]:
        master = self.master
        if master is None or master.pilot_id == self.pilot_id or not items:
            return []
        for key, _ in items:
            self.outbox.sent(key, now)
        return [SendDone(master, codec.Done(self.pilot_id, completion)) for _, completion in items]

    def _on_acked(self, event: Acked) -> list[Instruction]:
        if event.answer is NO_ANSWER:
            return []  # kept: resent later
        if event.answer == codec.PENDING:
            master = self.master
            return self._held(event.answer, master.epoch if master is not None else 0)
        if event.answer is None:  # not the master any more: the next one gets it
            self.succession.forget(event.now)
            return []
        if event.answer == codec.DONE_SYNCED:
            self.outbox.acked(event.key)
        if event.answer in (True, codec.DONE_SYNCED) and self.current == event.key:
            self.reported.add(event.key)
        return []

    # --- the election (Delgado Peris 2014 §III.B) ---------------------------------------------

    def _on_tick(self, event: Tick) -> list[Instruction]:
        if self._recheck is not None and event.now >= self._recheck[0]:
            check, self._recheck = self._recheck[1], None
            return [check]
        if self.stopping or self._claiming:
            return []
        action = self.succession.next_action(event.now)
        master = self.master
        if action is Action.PROBE and master is not None:
            return [Probe(master.pilot_id, master.address)]
        if action is Action.CLAIM:
            lower = tuple(
                (pilot, self.addresses.get(pilot))
                for pilot in self.succession.successors
                if pilot < self.pilot_id
            )
            self._claiming = True
            return [Claim(lower)]
        return []

    def next_tick(self, now: float) -> float:
        """Seconds until the election (or a check to ask again) may have something to do."""
        wait = self.succession.waiting_for(now)
        if self._recheck is not None:
            wait = min(wait, max(0.0, self._recheck[0] - now))
        return wait

    def _on_probed(self, event: ProbeEnded) -> list[Instruction]:
        master = self.master
        if not event.answered:
            self.succession.probe_failed(event.now)
            who = master.pilot_id if master is not None else "?"
            return [Log(logging.INFO, f"pilot {self.pilot_id}: the master (pilot {who}) is silent")]
        # Alive, but its TaskLists miss us: make ourselves known, and say hello again.
        self.succession.probe_answered(event.now)
        return self._meet(master, event.now, resend=False) if master is not None else []

    def _on_claim_answered(self, event: ClaimAnswered) -> list[Instruction]:
        self._claiming = False
        if event.lost:
            return [Leave(event.lost)]
        named = event.master
        if event.granted and named is not None:
            return self._become_master(named.epoch, event.pilots, event.now)
        dead = self.master
        if named is not None and (dead is None or named.epoch > dead.epoch):
            return self._on_named(Named(event.now, named))  # another pilot took it
        # Else the Task Queue still hears the master found dead (its timeout has not run out),
        # or a lower-id pilot should claim: the claim is retried shortly.
        return []

    def granted(self, epoch: int, pilots: Sequence[Any], now: float) -> list[Instruction]:
        """The Task Queue named this pilot the master at its registration."""
        return self._become_master(epoch, pilots, now)

    def _become_master(self, epoch: int, pilots: Sequence[Any], now: float) -> list[Instruction]:
        self.succession.granted(epoch, self.address, now)
        self.door.know_epoch(epoch)
        self.master_here = True
        unsynced = tuple(self.outbox.everything())  # what no master synced: its own now
        listed = next((p.task_id for p in pilots if p.pilot_id == self.pilot_id), None)
        running = self.current[0] if self.current is not None else None
        lost = lost_own_task(listed, running, {key[0] for key, _ in unsynced})
        if self.current is not None and any(key == self.current for key, _ in unsynced):
            self.reported.add(self.current)
        return [BecomeMaster(epoch, pilots, unsynced, lost)]


_HANDLERS: dict[type, Any] = {
    Heard: WorkerState._on_heard,
    Arrived: WorkerState._on_arrived,
    EndChecked: WorkerState._on_end_checked,
    Named: WorkerState._on_named,
    Greeted: WorkerState._on_greeted,
    Acked: WorkerState._on_acked,
    Ended: WorkerState._on_ended,
    GaveBack: WorkerState._on_gave_back,
    Tick: WorkerState._on_tick,
    ProbeEnded: WorkerState._on_probed,
    ClaimAnswered: WorkerState._on_claim_answered,
}
