"""A distributed site run by its pure cores alone, under a schedule a seed chooses (Delgado Peris
2014 §III.B-C): the model the schedule explorer of tests/unit/distributed drives.

Pieces:

- :class:`ModelTaskQueue`, an in-memory Task Queue for one site held to the store's rules
  (``tq.service.store``: master, claim, completions, pilots): the role granted by
  ``sched.election.arbitrate`` with a new epoch; every master call checked against the epoch
  (stale: refused) and vouching for the site's pilots; a completion accepted only from the pilot
  that runs that attempt (a repeat is answered, never counted); ``assign`` taking each task
  atomically, one per pilot; dead pilots, released tasks, revoked credentials and lapsed pilots
  (``reap``) requeue their task;
- :class:`SiteModel`: pilots, each a ``WorkerState`` (the master's pilot also a ``MasterState``),
  a network whose messages the schedule delivers in any order, loses (before or after the
  addressee acted), duplicates and delays; the Task Queue's calls, delayed or failing; the
  clock; kills (a core's state dropped), revocations, takeovers, a stale master's forged ``end``;
- the checks after every step: each task done at most once, no pilot obeys a master older than
  the newest it knew, no task running without a live runner longer than the timeouts allow; and
  :meth:`SiteModel.settle`: once the faults stop, every task is done (the site makes progress).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from glidein_ext.distributed import codec, machine
from glidein_ext.distributed import master_state as ms
from glidein_ext.distributed import worker_state as ws
from glidein_ext.distributed.master_state import MasterState, entry_of
from glidein_ext.sched.assign import assign
from glidein_ext.sched.election import MasterView, arbitrate
from glidein_ext.sched.ranking import Ranker, TaskEntry, WorkerAd
from glidein_ext.sched.ranking import WorkerState as RankState
from glidein_ext.sched.tasklist import encode_reply
from glidein_ext.tq.client import pilotkeys
from glidein_ext.tq.client.protocol import (
    Completion,
    PilotKey,
    SitePilot,
    TaskAssignment,
    TaskOffer,
)

SECRET = b"\x05" * 32
SITE = "T2_MODEL"
MASTER_TIMEOUT = 10.0  # the Task Queue's: a silent master's role may be claimed after it
HEARTBEAT_TIMEOUT = 60.0  # a pilot no master vouched for this long is lost
PERIOD, WINDOW = 1.0, 0.1
GRACE = max(3 * PERIOD, MASTER_TIMEOUT)  # a worker dead only after a master's silence
WALL = 1_700_000_000.0  # the wall clock at the model's time 0
# A task stays running without a live runner at most (since it was orphaned, or since the last
# takeover: a new master learns its roster from the Task Queue): the grace and a probe, a round
# or two, a takeover (the master's silence, the claims' staggers), or a lapse of the pilots'
# heartbeat when no master vouches for them.
ORPHAN_BOUND = HEARTBEAT_TIMEOUT + MASTER_TIMEOUT + 4 * GRACE


class Stale(Exception):
    pass


class Gone(Exception):
    pass


@dataclass
class ModelTask:
    state: str = "queued"  # queued, running, done
    attempt: int = 0
    runner: int | None = None
    done: int = 0  # completions accepted


@dataclass
class ModelPilot:
    live: bool = True
    task: int | None = None
    seen: float = 0.0


class ModelTaskQueue:
    """The Task Queue's rules for one distributed site, in memory."""

    def __init__(self, tasks: int) -> None:
        self.tasks = {i: ModelTask() for i in range(1, tasks + 1)}
        self.pilots: dict[int, ModelPilot] = {}
        self.master: int | None = None
        self.epoch = 0
        self.master_seen = 0.0
        self.granted_at = 0.0  # when the role was last granted (a new master learns its roster)

    def key(self, pilot_id: int, epoch: int) -> bytes:
        return pilotkeys.epoch_key(pilotkeys.pilot_key(SECRET, SITE, pilot_id), epoch)

    def _live(self) -> list[int]:
        return [p for p, row in self.pilots.items() if row.live]

    def register(self, pilot_id: int, now: float) -> bool:
        """A new pilot; True when it is the site's first: the master (epoch 1)."""
        self.pilots[pilot_id] = ModelPilot(seen=now)
        if self.master is None:
            self.master, self.epoch, self.master_seen = pilot_id, 1, now
            return True
        return False

    def site_pilots(self, epoch: int) -> tuple[SitePilot, ...]:
        out = []
        for pilot_id in self._live():
            row = self.pilots[pilot_id]
            attempt = self.tasks[row.task].attempt if row.task is not None else None
            key = self.key(pilot_id, epoch).hex()
            out.append(SitePilot(pilot_id, f"m:{pilot_id}", row.task, attempt, key))
        return tuple(out)

    def claim(self, pilot_id: int, unreachable: tuple[int, ...], now: float) -> Any:
        if pilot_id not in self.pilots or not self.pilots[pilot_id].live:
            raise Gone(f"pilot {pilot_id}")
        master = self.master
        alive = (
            master is not None
            and self.pilots[master].live
            and now - self.master_seen <= MASTER_TIMEOUT
        )
        verdict = arbitrate(pilot_id, master, alive, self._live(), unreachable)
        if not verdict.granted:
            named = None
            if alive and master is not None:
                named = MasterView(master, ("m", master), self.epoch)
            return False, named, ()
        if master is not None and master != pilot_id and self.pilots[master].live:
            self._retire(master)  # silent for the master timeout: lost
        self.master, self.epoch, self.master_seen = pilot_id, self.epoch + 1, now
        self.granted_at = now
        view = MasterView(pilot_id, ("m", pilot_id), self.epoch)
        return True, view, self.site_pilots(self.epoch)

    def _check(self, pilot_id: int, epoch: int, now: float) -> None:
        if pilot_id not in self.pilots or not self.pilots[pilot_id].live:
            raise Gone(f"pilot {pilot_id} is refused")
        if self.master != pilot_id or self.epoch != epoch:
            raise Stale(f"pilot {pilot_id} (epoch {epoch}) is not the master")
        self.master_seen = now
        for row in self.pilots.values():
            if row.live:
                row.seen = now

    def _retire(self, pilot_id: int) -> None:
        row = self.pilots[pilot_id]
        if row.task is not None:
            self._requeue(row.task)
        row.live = False
        row.task = None

    def _requeue(self, task_id: int) -> None:
        task = self.tasks[task_id]
        if task.runner is not None and task.runner in self.pilots:
            self.pilots[task.runner].task = None
        task.state, task.runner = "queued", None

    def _complete(self, completions: Any) -> None:
        for pilot_id, completion in completions:
            row = self.pilots.get(pilot_id)
            task = self.tasks[completion.task_id]
            current = (
                task.state == "running"
                and task.attempt == completion.attempt
                and task.runner == pilot_id
            )
            if row is None or not row.live or not current:
                continue  # a repeat, or stale: answered, never counted
            task.state, task.runner = "done", None
            task.done += 1
            row.task = None

    def sync(self, master: int, epoch: int, ins: ms.CallSync, now: float) -> Any:
        self._check(master, epoch, now)
        for pilot_id in ins.report.dead:
            if pilot_id in self.pilots and self.pilots[pilot_id].live:
                self._retire(pilot_id)
        self._complete(ins.report.completions)
        for task_id in ins.report.release:
            if self.tasks[task_id].state == "running":
                self._requeue(task_id)
        live = set(self._live())
        keys = tuple(PilotKey(p, self.key(p, epoch).hex()) for p in sorted(set(ins.pilots) & live))
        gone = tuple(sorted(set(ins.pilots) - live))
        queued = [i for i, task in self.tasks.items() if task.state == "queued"]
        offers = tuple(_offer(i) for i in queued[: ins.want])
        return offers, len(queued), keys, gone

    def assign(self, master: int, epoch: int, ins: ms.CallAssign, now: float) -> Any:
        self._check(master, epoch, now)
        self._complete(ins.completions)
        accepted: list[ms.Accepted[TaskOffer]] = []
        refused: list[_Refused] = []
        given: set[int] = set()
        for pair in ins.pairs:
            row = self.pilots.get(pair.pilot_id)
            task = self.tasks[pair.task_id]
            if pair.pilot_id in given or row is None or not row.live or row.task is not None:
                refused.append(_Refused(pair.task_id, pair.pilot_id, "pilot"))
                continue
            if task.state != "queued":
                refused.append(_Refused(pair.task_id, pair.pilot_id, "task"))
                continue
            task.state, task.runner, task.attempt = "running", pair.pilot_id, task.attempt + 1
            row.task = pair.task_id
            given.add(pair.pilot_id)
            accepted.append(ms.Accepted(pair.task_id, pair.pilot_id, task.attempt))
        return tuple(accepted), tuple(refused)

    def heartbeat(self, pilot_id: int) -> None:
        row = self.pilots.get(pilot_id)
        if row is None or not row.live:
            raise Gone(f"pilot {pilot_id}")

    def revoke(self, pilot_id: int) -> None:
        if self.pilots[pilot_id].live:
            self._retire(pilot_id)

    def deregister(self, pilot_id: int) -> None:
        if pilot_id in self.pilots and self.pilots[pilot_id].live:
            self._retire(pilot_id)

    def reap(self, now: float) -> None:
        for pilot_id, row in self.pilots.items():
            if row.live and now - row.seen > HEARTBEAT_TIMEOUT:
                self._retire(pilot_id)


@dataclass(frozen=True)
class _Refused:
    task_id: int
    pilot_id: int
    reason: str


def _offer(task_id: int) -> TaskOffer:
    return TaskOffer(task_id, f"t{task_id}", "true", (), (), 60)


@dataclass
class Pilot:
    """One pilot: its worker core, the master core it may hold, the task it runs."""

    pilot_id: int
    worker: ws.WorkerState
    master: MasterState[TaskOffer] | None = None
    master_timer: float | None = None
    running: TaskAssignment | None = None
    reporting: Completion | None = None


Going = Callable[[], Optional[Callable[[], None]]]  # carries a flight out: its answer's follow-up


def _ignore(_value: Any) -> None:
    pass


@dataclass
class Flight:
    """A message or a call in flight: ``go`` carries it out and returns the follow-up to run when
    its answer arrives (None: none); ``fail`` is what its sender learns when it is lost."""

    number: int
    what: str
    go: Going
    fail: Callable[[], None]
    sent: float


@dataclass
class SiteModel:
    """A site of ``workers`` pilots and ``tasks`` tasks under a schedule drawn from ``rng``."""

    rng: random.Random
    workers: int = 4
    tasks: int = 8
    now: float = 0.0
    tq: ModelTaskQueue = field(init=False)
    pilots: dict[int, Pilot] = field(default_factory=dict)
    flights: list[Flight] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    orphaned: dict[int, float] = field(default_factory=dict)  # task: since when
    _numbers: int = 0

    def __post_init__(self) -> None:
        self.tq = ModelTaskQueue(self.tasks)
        for pilot_id in range(1, self.workers + 1):
            self._start(pilot_id)

    # --- pilots ---------------------------------------------------------------------------

    def _start(self, pilot_id: int) -> None:
        first = self.tq.register(pilot_id, self.now)
        key = pilotkeys.pilot_key(SECRET, SITE, pilot_id)
        core = ws.WorkerState(
            pilot_id, key, ("m", pilot_id), silence=3 * PERIOD + MASTER_TIMEOUT, now=self.now
        )
        pilot = self.pilots[pilot_id] = Pilot(pilot_id, core)
        if first:
            self._worker_do(pilot, core.granted(1, (), self.now))
        elif self.tq.master is not None:
            view = MasterView(self.tq.master, ("m", self.tq.master), self.tq.epoch)
            self._worker(pilot, ws.Named(self.now, view))

    def alive(self, pilot_id: int) -> Pilot | None:
        return self.pilots.get(pilot_id)

    def kill(self, pilot_id: int) -> None:
        """SIGKILL: the pilot's state is gone; the Task Queue still lists it until told."""
        self.trace.append(f"{self.now:.1f} kill {pilot_id}")
        self.pilots.pop(pilot_id, None)

    def revoke(self, pilot_id: int) -> None:
        self.trace.append(f"{self.now:.1f} revoke {pilot_id}")
        self.tq.revoke(pilot_id)

    # --- driving the cores ------------------------------------------------------------------

    def _worker(self, pilot: Pilot, event: Any) -> list[Any]:
        before = pilot.worker.door.epoch
        out = pilot.worker.handle(event)
        if isinstance(event, ws.Arrived):  # obeyed: a task run, or an end taken seriously
            obeyed = [i for i in out if isinstance(i, (ws.Run, ws.CheckEnd))]
            epoch = event.payload[1] if isinstance(event.payload, list) else None
            assert not obeyed or epoch is None or epoch >= before, (
                f"pilot {pilot.pilot_id} obeyed a master of epoch {epoch} after {before}"
            )
        self._worker_do(pilot, out)
        return out

    def _worker_do(self, pilot: Pilot, out: list[Any]) -> None:
        p = pilot.pilot_id
        for ins in out:
            if isinstance(ins, ws.Run):
                pilot.running = ins.task
            elif isinstance(ins, ws.Meet):
                self._to_master(p, ins.master, ins.hello, self._greeted(p, ins))
            elif isinstance(ins, ws.SendDone):
                self._to_master(p, ins.master, ins.done, self._acked(p, ins.key))
            elif isinstance(ins, ws.CheckEnd):
                self._ask(p, ins)
            elif isinstance(ins, machine.Probe):
                self._probe(p, ins, lambda event: self._worker_if(p, event))
            elif isinstance(ins, ws.Claim):
                self._claim_role(p, ins)
            elif isinstance(ins, ws.BecomeMaster):
                self._become_master(pilot, ins)
            elif isinstance(ins, ws.OwnDone) and pilot.master is not None:
                self._master(pilot, ms.LocalDone(self.now, p, ins.completion))
            elif isinstance(ins, ws.Leave):
                self.trace.append(f"{self.now:.1f} pilot {p} leaves: {ins.reason}")
                self.tq.deregister(p)
                self.pilots.pop(p, None)

    def _greeted(self, p: int, meet: ws.Meet) -> Callable[[Any], None]:
        def then(answer: Any) -> None:
            pilot = self.alive(p)
            if pilot is not None and answer is not ws.NO_ANSWER:
                self._worker(pilot, ws.Greeted(self.now, meet, answer))

        return then

    def _acked(self, p: int, key: tuple[int, int]) -> Callable[[Any], None]:
        def then(answer: Any) -> None:
            pilot = self.alive(p)
            if pilot is not None:
                self._worker(pilot, ws.Acked(self.now, key, answer))

        return then

    def _to_master(
        self, p: int, view: MasterView, message: Any, then: Callable[[Any], None]
    ) -> None:
        """A worker's sealed message to the master of ``view``; ``then`` gets its answer's
        value (None, "pending", ...) or NO_ANSWER."""
        key = pilotkeys.epoch_key(pilotkeys.pilot_key(SECRET, SITE, p), view.epoch)
        kind = codec.kind_of(message)
        payload = codec.seal_message(key, message, p, view.epoch, WALL + self.now)

        def go() -> Callable[[], None] | None:
            target = self.alive(view.pilot_id)
            if target is None or target.master is None:
                return lambda: then(None if target is not None else ws.NO_ANSWER)
            out = self._master(target, ms.MessageArrived(self.now, WALL + self.now, kind, payload))
            answer = next(i.value for i in out if isinstance(i, machine.Answer))
            if answer is None or answer == codec.PENDING:
                return lambda: then(answer)
            try:
                value = codec.open_answer(key, kind, payload[2], answer)
            except ValueError:
                value = ws.NO_ANSWER
            return lambda: then(value)

        self._fly(f"{kind} {p}->{view.pilot_id}", go, lambda: then(ws.NO_ANSWER))

    def _ask(self, p: int, ins: ws.CheckEnd) -> None:
        unknown = ws.EndChecked(self.now, ins, None)  # no answer came
        self._fly(
            f"heartbeat {p}", lambda: self._check_end(p, ins), lambda: self._worker_if(p, unknown)
        )

    def _claim_role(self, p: int, ins: ws.Claim) -> None:
        failed = ws.ClaimAnswered(self.now, False, None, ())  # the call failed
        self._fly(f"claim {p}", lambda: self._claim(p, ins), lambda: self._worker_if(p, failed))

    def _check_end(self, p: int, ins: ws.CheckEnd) -> Callable[[], None] | None:
        try:
            self.tq.heartbeat(p)
            gone = False
        except Gone:
            gone = True
        pilot = self.alive(p)
        if pilot is None:
            return None
        return lambda: self._worker_if(p, ws.EndChecked(self.now, ins, gone))

    def _worker_if(self, p: int, event: Any) -> None:
        pilot = self.alive(p)
        if pilot is not None:
            self._worker(pilot, event)

    def _probe(self, p: int, ins: machine.Probe, feed: Callable[[Any], None]) -> None:
        """Pilot ``p`` pings another (its master, a suspect worker); ``feed`` takes the end."""
        target = ins.pilot_id

        def go() -> Callable[[], None] | None:
            answered = self.alive(target) is not None
            return lambda: feed(machine.ProbeEnded(self.now, target, answered))

        self._fly(
            f"ping {p}->{target}", go, lambda: feed(machine.ProbeEnded(self.now, target, False))
        )

    def _claim(self, p: int, ins: ws.Claim) -> Callable[[], None] | None:
        unreachable = tuple(pilot for pilot, _ in ins.lower if self.alive(pilot) is None)
        try:
            granted, view, pilots = self.tq.claim(p, unreachable, self.now)
        except Gone as exc:
            lost = ws.ClaimAnswered(self.now, False, None, (), str(exc))
            return lambda: self._worker_if(p, lost)
        if granted:
            self.trace.append(f"{self.now:.1f} pilot {p} is the master of epoch {view.epoch}")
        return lambda: self._worker_if(p, ws.ClaimAnswered(self.now, granted, view, pilots))

    def _become_master(self, pilot: Pilot, ins: ws.BecomeMaster) -> None:
        p = pilot.pilot_id
        core: MasterState[TaskOffer] = MasterState(
            p,
            ins.epoch,
            window=WINDOW,
            period=PERIOD,
            heartbeat=MASTER_TIMEOUT / 3,
            grace=GRACE,
            now=self.now,
            entry=entry_of,
            address=("m", p),
        )
        pilot.master = core
        self._master(pilot, ms.Installed(self.now, tuple(ins.pilots)))
        for _, completion in ins.unsynced:
            self._master(pilot, ms.LocalDone(self.now, p, completion))
        if ins.lost is not None:
            self._master(pilot, ms.Undelivered(self.now, ins.lost, p))
        self._master(pilot, ms.Started(self.now, ("m", p)))

    def _master(self, pilot: Pilot, event: Any) -> list[Any]:
        core = pilot.master
        assert core is not None
        out = core.handle(event)
        for ins in out:
            self._master_do(pilot, core, ins)
        return out

    def _master_if(self, p: int, core: MasterState[TaskOffer], event: Any) -> None:
        pilot = self.alive(p)
        if pilot is not None and pilot.master is core:
            self._master(pilot, event)

    def _master_do(self, pilot: Pilot, core: MasterState[TaskOffer], ins: Any) -> None:
        p, epoch = pilot.pilot_id, core.epoch
        if isinstance(ins, (ms.CallSync, ms.CallAssign)):
            self._master_call(p, core, ins)
        elif isinstance(ins, ms.Broadcast):
            self._broadcast(pilot, core, ins)
        elif isinstance(ins, ms.Solve):
            result = assign(ins.matrix, "greedy")
            self._master_if(p, core, ms.Solved(self.now, result, None))
        elif isinstance(ins, ms.Deliver):
            self._deliver(p, core, ins)
        elif isinstance(ins, machine.Probe):
            self._probe(p, ins, lambda event: self._master_if(p, core, event))
        elif isinstance(ins, ms.Send):
            self._to_worker(epoch, ins.pilot_id, ins.key, ins.message, _ignore)
        elif isinstance(ins, ms.ArmTimer):
            pilot.master_timer = ins.at
        elif isinstance(ins, ms.StepDown):
            self.trace.append(f"{self.now:.1f} master {p} (epoch {epoch}) steps down: {ins.reason}")
            self.tq.deregister(p)  # the pilot stops (on_step_down)
            self.pilots.pop(p, None)
        elif isinstance(ins, ms.Finished):
            pilot.master_timer = None

    def _master_call(self, p: int, core: MasterState[TaskOffer], ins: Any) -> None:
        """A ``sync`` or ``assign`` call of the master of ``core``'s epoch."""
        epoch, now = core.epoch, self.now

        def call() -> Callable[[], None] | None:
            event: Any
            try:
                if isinstance(ins, ms.CallSync):
                    offers, queued, keys, gone = self.tq.sync(p, epoch, ins, self.now)
                    wall = WALL + self.now
                    event = ms.SyncAnswered(
                        self.now, ins.call, offers, queued, frozenset(), keys, gone, False, wall
                    )
                else:
                    accepted, refused = self.tq.assign(p, epoch, ins, self.now)
                    event = ms.AssignAnswered(self.now, ins.call, accepted, refused)
            except (Stale, Gone) as exc:
                failure = ms.Failure.STALE if isinstance(exc, Stale) else ms.Failure.REFUSED
                event = ms.CallFailed(self.now, ins.call, failure, str(exc))
            return lambda: self._master_if(p, core, event)

        lost = ms.CallFailed(now, ins.call, ms.Failure.ERROR, "lost")
        what = "sync" if isinstance(ins, ms.CallSync) else "assign"
        self._fly(f"{what} {p}", call, lambda: self._master_if(p, core, lost))

    def _broadcast(self, pilot: Pilot, core: MasterState[TaskOffer], ins: ms.Broadcast) -> None:
        """The TaskList to every live worker; the replies that come back within the round."""
        p = pilot.pilot_id
        master = MasterView(p, ("m", p), core.epoch)

        def go() -> Callable[[], None] | None:
            replies: list[Any] = []
            for other in list(self.pilots.values()):
                if other.pilot_id == p or self.rng.random() < 0.05:  # a reply lost in the tree
                    continue
                event = ws.Heard(self.now, master, core.book.successors())
                out = self._worker(other, event)
                reply = out[-1]
                if isinstance(reply, ws.ReplyBusy):
                    replies += encode_reply(other.pilot_id, reply.task_id, reply.last_done, None)
                elif isinstance(reply, ws.Rank):
                    ranker = Ranker(WorkerAd({"Site": SITE}))
                    shown = [TaskEntry(i, e.spec, e.inputs) for i, e in enumerate(ins.entries)]
                    ranking = ranker.rank(shown, RankState(), ins.limit, other.pilot_id)
                    replies += encode_reply(other.pilot_id, 0, reply.last_done, ranking)
            complete = len(replies) == len(self.pilots) - 1
            return lambda: self._master_if(
                p, core, ms.BroadcastEnded(self.now, replies, 0.01, complete)
            )

        self._fly(
            f"tasklist {p}",
            go,
            lambda: self._master_if(p, core, ms.BroadcastFailed(self.now, "lost")),
        )

    def _deliver(self, p: int, core: MasterState[TaskOffer], ins: Any) -> None:
        offer = ins.offer
        task = TaskAssignment(offer.task_id, ins.attempt, offer.name, offer.command, (), (), 60, 0)
        number = ins.handout

        def then(value: Any) -> None:
            if value is ws.NO_ANSWER:
                outcome = ms.HandOut.LOST
            else:
                outcome = ms.HandOut.TAKEN if value is True else ms.HandOut.REFUSED
            self._master_if(p, core, ms.HandOutEnded(self.now, number, outcome))

        self._to_worker(ins.epoch, ins.pilot_id, ins.key, codec.Assign(ins.epoch, task), then)

    def _to_worker(
        self, epoch: int, target: int, key: bytes, message: Any, then: Callable[[Any], None]
    ) -> None:
        kind = codec.kind_of(message)
        payload = codec.seal_message(key, message, target, epoch, WALL + self.now)

        def go() -> Callable[[], None] | None:
            pilot = self.alive(target)
            if pilot is None:
                return lambda: then(ws.NO_ANSWER)
            out = self._worker(pilot, ws.Arrived(self.now, kind, payload, WALL + self.now))
            answer = next(i.value for i in out if isinstance(i, machine.Answer))
            try:
                value = codec.open_answer(key, kind, payload[2], answer)
            except ValueError:
                value = answer  # False: refused unsealed
            return lambda: then(value)

        self._fly(f"{kind} ->{target}", go, lambda: then(ws.NO_ANSWER))

    def stale_end(self) -> None:
        """A master of an older epoch uses the key it had with a pilot: an ``end`` to it."""
        current = self.tq.epoch
        live = sorted(self.pilots)
        if current < 2 or not live:
            return
        epoch, target = self.rng.randrange(1, current), self.rng.choice(live)
        self.trace.append(f"{self.now:.1f} stale end of epoch {epoch} to {target}")
        self._to_worker(epoch, target, self.tq.key(target, epoch), codec.End("stop"), _ignore)

    # --- the network ------------------------------------------------------------------------

    def _fly(
        self, what: str, go: Callable[[], Callable[[], None] | None], fail: Callable[[], None]
    ) -> None:
        self._numbers += 1
        self.flights.append(Flight(self._numbers, what, go, fail, self.now))

    def _call(
        self, what: str, go: Callable[[], Callable[[], None] | None], fail: Callable[[], None]
    ) -> None:
        self._fly(what, go, fail)

    def deliver(self, index: int, answer_lost: bool = False, twice: bool = False) -> None:
        flight = self.flights.pop(index)
        self.trace.append(
            f"{self.now:.1f} deliver {flight.what}{' (answer lost)' if answer_lost else ''}"
        )
        then = flight.go()
        if twice:
            flight.go()  # a duplicate: its answer dropped
        if answer_lost:
            flight.fail()
        elif then is not None:
            then()

    def lose(self, index: int) -> None:
        flight = self.flights.pop(index)
        self.trace.append(f"{self.now:.1f} lose {flight.what}")
        flight.fail()

    # --- time and work ----------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.tq.reap(self.now)
        for pilot in list(self.pilots.values()):
            if pilot.pilot_id not in self.pilots:
                continue
            core = pilot.master
            if (
                core is not None
                and pilot.master_timer is not None
                and pilot.master_timer <= self.now
            ):
                pilot.master_timer = None
                self._master(pilot, machine.Tick(self.now))
            if pilot.pilot_id in self.pilots:
                self._worker(pilot, machine.Tick(self.now))

    def finish_task(self, pilot_id: int) -> None:
        pilot = self.alive(pilot_id)
        if pilot is None or pilot.running is None:
            return
        task = pilot.running
        pilot.running = None
        pilot.reporting = Completion(task.task_id, task.attempt, 0)
        self.trace.append(
            f"{self.now:.1f} pilot {pilot_id} ends task {task.task_id}/{task.attempt}"
        )
        self.report(pilot_id)

    def report(self, pilot_id: int) -> None:
        """The pilot's thread reports (again, until a master holds it)."""
        pilot = self.alive(pilot_id)
        if pilot is None or pilot.reporting is None:
            return
        done = pilot.reporting
        key = (done.task_id, done.attempt)
        self._worker(pilot, ws.Ended(self.now, done))
        if pilot.worker.acknowledged(key):
            pilot.worker.finish(key)
            pilot.reporting = None

    # --- the checks -------------------------------------------------------------------------

    def check(self) -> None:
        for task_id, task in self.tq.tasks.items():
            assert task.done <= 1, f"task {task_id} done {task.done} times"
            runner = None if task.runner is None else self.alive(task.runner)
            busy = runner is not None and (
                (runner.running is not None and runner.running.task_id == task_id)
                or (runner.reporting is not None and runner.reporting.task_id == task_id)
                or runner.worker.current == (task_id, task.attempt)
            )
            if task.state != "running" or busy:
                self.orphaned.pop(task_id, None)
                continue
            # A new master learns its roster from the Task Queue: its grace starts again.
            since = max(self.orphaned.setdefault(task_id, self.now), self.tq.granted_at)
            assert self.now - since <= ORPHAN_BOUND, (
                f"task {task_id} running at the Task Queue without a live runner since {since:.1f}"
            )

    def settle(self, limit: float = 600.0) -> None:
        """The faults stop: messages arrive, tasks end, time goes on; every task gets done."""
        end = self.now + limit
        while self.now < end:
            while self.flights:
                self.deliver(0)
            for pilot_id in list(self.pilots):
                self.finish_task(pilot_id)
                self.report(pilot_id)
            self.check()
            if all(task.state == "done" for task in self.tq.tasks.values()):
                return
            if len(self.pilots) < 2:  # a master and a worker at least: glideins keep coming
                self._start(max(self.tq.pilots) + 1)
            self.advance(0.25)
        undone = {i: t for i, t in self.tq.tasks.items() if t.state != "done"}
        raise AssertionError(f"no progress: {undone}\n" + "\n".join(self.trace[-60:]))


def explore(seed: int, steps: int = 120) -> SiteModel:
    """One schedule: ``steps`` random steps (deliveries in any order, losses, duplicates, time,
    task ends, kills, revocations, a stale master's end), the checks after each, then
    :meth:`SiteModel.settle`."""
    rng = random.Random(seed)
    site = SiteModel(rng, workers=rng.randint(2, 5), tasks=rng.randint(1, 10))
    site.advance(0.0)
    for _ in range(steps):
        roll = rng.random()
        if site.flights and roll < 0.45:
            index = rng.randrange(len(site.flights))
            how = rng.random()
            if how < 0.06:
                site.lose(index)
            else:
                site.deliver(index, answer_lost=how < 0.1, twice=0.1 <= how < 0.14)
        elif roll < 0.7:
            site.advance(rng.choice((0.05, 0.2, 1.0, 3.0)))
        elif roll < 0.88:
            for pilot_id in list(site.pilots):
                if rng.random() < 0.5:
                    site.finish_task(pilot_id)
                site.report(pilot_id)
        elif roll < 0.93 and site.pilots:
            site.stale_end()
        elif roll < 0.965 and len(site.pilots) > 1:
            site.kill(rng.choice(sorted(site.pilots)))
        elif roll < 0.98 and len(site.pilots) > 1:
            site.revoke(rng.choice(sorted(site.pilots)))
        elif rng.random() < 0.5:
            site._start(max(site.tq.pilots) + 1)  # a new glidein joins the site
        site.check()
    site.settle()
    return site
