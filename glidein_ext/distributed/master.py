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

The rounds' decisions are ``distributed.master_state.MasterState``'s, a pure state machine;
this module is its asyncio shell: it feeds it events (the clock, the Task Queue's answers, the
broadcast's replies, the workers' sealed hello/done/bye messages, the hand-outs' and probes'
ends) and carries out its instructions (Task Queue calls in the loop's executor, DHT broadcast,
messages and pings, sealing with each worker's key, one timer).

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
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from glidein_ext.dht.node import DhtNode
from glidein_ext.distributed import codec as messages
from glidein_ext.distributed import machine
from glidein_ext.distributed import master_state as ms
from glidein_ext.distributed.master_state import (
    BROADCAST_FLOOR,
    CLOSE_TIMEOUT,
    REPLY_BUDGET,
    TASKLIST_BUDGET,
)
from glidein_ext.distributed.phases import RoundPhases
from glidein_ext.errors import DhtError, StaleMasterError, TaskQueueAuthError, TaskQueueError
from glidein_ext.sched.assign import DEFAULT_METHOD, optimal_available
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.protocol import (
    Completion,
    SiteAssign,
    SiteCompletion,
    SitePilot,
    SiteSync,
    TaskAssignment,
    TaskOffer,
)

__all__ = [
    "BROADCAST_FLOOR",
    "CLOSE_TIMEOUT",
    "REFUSED_BURST",
    "REFUSED_PERIOD",
    "REPLY_BUDGET",
    "TASKLIST_BUDGET",
    "TOPIC",
    "MasterRole",
    "RefusedLog",
]

T = TypeVar("T")
log = logging.getLogger("glidein_ext.distributed.master")
TOPIC = "tasklist"
PROBE_TIMEOUT = 3.0  # seconds a suspect has to answer its probe (a loaded process answers late)
SEND_TIMEOUT = 1.0  # seconds an ``end`` or a resignation waits for its answer


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
        self.solver = ms.RoundSolver(method, log)  # the assignment method, greedy without scipy
        self.on_step_down = on_step_down
        self.core: ms.MasterState[TaskOffer] = ms.MasterState(
            pilot_id,
            epoch,
            window=window,
            period=period,
            heartbeat=heartbeat,
            grace=grace,
            now=time.monotonic(),
            entry=ms.entry_of,
            broadcast_timeout=broadcast_timeout,
        )
        self.refused = RefusedLog(log)  # the refused pairs' lines, rate limited
        self._tasks: set[asyncio.Future[Any]] = set()  # calls, broadcasts, sends (owned here)
        self._resigning: list[asyncio.Future[Any]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._finished: asyncio.Event | None = None  # the core's ms.Finished came
        self._ended: asyncio.Event | None = None  # set when :meth:`run` returns
        # The instructions carried out by a task of their own: a call, a broadcast, a send.
        self._spawned: dict[type[Any], Callable[[Any], Coroutine[Any, Any, None]]] = {
            ms.CallSync: self._sync,
            ms.CallAssign: self._assign,
            ms.Broadcast: self._broadcast,
            ms.Solve: self._solve,
            ms.Deliver: self._deliver,
            machine.Probe: self._probe,
        }

    # --- the core's state, for the worker and the logs (tests read the core) -------------------

    @property
    def active(self) -> bool:
        return self.core.active

    @property
    def phases(self) -> RoundPhases:
        return self.core.phases

    def busy(self) -> bool:
        """Whether the site has work (``ms.MasterState.busy``): a master is not idle then."""
        return self.core.busy()

    # --- events --------------------------------------------------------------------------------

    def install(self, pilots: Sequence[SitePilot] = ()) -> None:
        """Take the messages of a master; ``pilots``: the site's live pilots at a takeover."""
        self._feed(ms.Installed(time.monotonic(), tuple(pilots)))
        for kind in (messages.HELLO, messages.DONE, messages.BYE):
            self.node.register_message(kind, functools.partial(self._on_message, kind))

    def local_done(self, pilot_id: int, completion: Completion) -> None:
        """A completion, from a worker or from this pilot's own last task."""
        self._feed(ms.LocalDone(time.monotonic(), pilot_id, completion))

    def release_undelivered(self, task_id: int, pilot_id: int) -> None:
        """A task the Task Queue lists as ``pilot_id``'s never reached it: released."""
        self._feed(ms.Undelivered(time.monotonic(), task_id, pilot_id))

    def _on_message(self, kind: str, payload: Any, _sender: int, _address: Any) -> Any:
        """A worker's sealed message: the core's answer (sealed; None: none)."""
        answer = None
        for instruction in self.core.handle(
            ms.MessageArrived(time.monotonic(), time.time(), kind, payload)
        ):
            if isinstance(instruction, machine.Answer):
                answer = instruction.value
            else:
                self._carry(instruction)
        return answer

    def _feed(self, event: ms.Event) -> None:
        for instruction in self.core.handle(event):
            self._carry(instruction)

    # --- the rounds ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Rounds until the role ends (a stale call, or :meth:`close`) or the task is
        cancelled."""
        self._ended = ended = asyncio.Event()
        finished = self._finished_event()
        log.info("pilot %s is the master of %s (epoch %s)", self.pilot_id, self.site, self.epoch)
        # numpy and scipy take seconds to import on a loaded node: in a thread, now, so that
        # neither the first round that assigns nor the node's event loop waits for them.
        warming = asyncio.get_running_loop().run_in_executor(None, optimal_available)
        try:
            self._feed(ms.Started(time.monotonic(), self.node.address))
            await finished.wait()
            if self._resigning:
                await asyncio.gather(*self._resigning)
        finally:
            if not warming.done():
                warming.cancel()
            log.info(
                "master: %d round(s); in all: %s",
                self.phases.rounds,
                ", ".join(f"{p} {v:.1f} s" for p, v in self.phases.totals.items()),
            )
            self._stop()
            ended.set()

    def _finished_event(self) -> asyncio.Event:
        if self._finished is None:
            self._finished = asyncio.Event()
            if not self.core.active:
                self._finished.set()
        return self._finished

    def _stop(self) -> None:
        """The role ends: its timer, calls, hand-outs and probes in flight with it."""
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()

    async def close(self, timeout: float = CLOSE_TIMEOUT) -> bool:
        """The pilot leaves: the round under way ends, the hand-outs in flight end (those that
        did not arrive are released), and one last ``sync`` carries what the master holds -- its
        own completions, its workers' it acknowledged, dead workers, tasks to release -- before
        the role ends (Delgado Peris 2014 §III.B: a master that steps down loses no
        completion).  True when the Task Queue has it all."""
        if not self.core.active:
            return False
        ended = self._ended
        if ended is None:  # the rounds never started: the last sync here
            finished = self._finished_event()
            self._feed(ms.Close(time.monotonic()))
            with contextlib.suppress(asyncio.TimeoutError):  # 3.9: not the builtin's
                await asyncio.wait_for(finished.wait(), timeout)
            self.core.active = False
            self._stop()
            return finished.is_set() and self.core.clean
        self._feed(ms.Close(time.monotonic()))
        with contextlib.suppress(asyncio.TimeoutError):  # 3.9: not the builtin's
            await asyncio.wait_for(ended.wait(), timeout)
        self.core.active = False
        return self.core.clean

    # --- instructions --------------------------------------------------------------------------

    def _carry(self, instruction: ms.Instruction) -> None:
        """Carry one of the core's instructions out (a call, a send: a task owned here)."""
        start = self._spawned.get(type(instruction))
        if start is not None:
            self._spawn(start(instruction))
        elif isinstance(instruction, ms.Send):
            send = self._spawn(self._send(instruction))
            if isinstance(instruction.message, messages.Resign):
                self._resigning.append(send)
        elif isinstance(instruction, ms.ArmTimer):
            self._arm(instruction.at)
        elif isinstance(instruction, ms.LogRefused):
            self.refused.write(instruction.refused, instruction.now)
        elif isinstance(instruction, machine.Log):
            log.log(instruction.level, "%s", instruction.message)
        elif isinstance(instruction, ms.StepDown):
            log.warning("master: pilot %s steps down: %s", self.pilot_id, instruction.reason)
            self.on_step_down(instruction.reason)
        elif isinstance(instruction, ms.Finished):
            if self._timer is not None:
                self._timer.cancel()
            self._finished_event().set()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(0.0, at - time.monotonic()), self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._feed(machine.Tick(time.monotonic()))

    async def _tq(self, call: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(call, *args))

    def _failed(self, number: int, exc: TaskQueueError) -> ms.CallFailed:
        now = time.monotonic()
        if isinstance(exc, StaleMasterError):
            return ms.CallFailed(now, number, ms.Failure.STALE, str(exc))
        if isinstance(exc, TaskQueueAuthError):  # revoked: the Task Queue ended this pilot
            return ms.CallFailed(now, number, ms.Failure.REFUSED, str(exc))
        log.warning("master: the Task Queue call failed (kept for the next one): %s", exc)
        return ms.CallFailed(now, number, ms.Failure.ERROR, str(exc))

    async def _sync(self, ins: ms.CallSync) -> None:
        """One ``sync``; a long poll the core gives up for an event goes on here, unheeded (the
        master's next call ends it at the Task Queue)."""
        report = ins.report
        call = SiteSync(
            pilot_id=self.pilot_id,
            epoch=self.epoch,
            completions=tuple(SiteCompletion(p, c) for p, c in report.completions),
            dead=report.dead,
            release=report.release,
            want=ins.want,
            pilots=ins.pilots,
            phases=ins.phases,
            wait=ins.wait,
        )
        try:
            answer = await self._tq(self.client.sync, self.site, call)
        except TaskQueueError as exc:
            self._feed(self._failed(ins.call, exc))
            return
        self._feed(
            ms.SyncAnswered(
                time.monotonic(),
                ins.call,
                answer.tasks,
                answer.queued,
                frozenset(offer.task_id for offer in answer.tasks if offer.shared),
                answer.keys,
                answer.gone,
                answer.seen,
                time.time(),
            )
        )

    async def _assign(self, ins: ms.CallAssign) -> None:
        completions = tuple(SiteCompletion(p, c) for p, c in ins.completions)
        call = SiteAssign(self.pilot_id, self.epoch, ins.pairs, ins.report, completions)
        try:
            answer = await self._tq(self.client.assign, self.site, call)
        except TaskQueueError as exc:
            self._feed(self._failed(ins.call, exc))
            return
        accepted = tuple(
            ms.Accepted(p.task_id, p.pilot_id, p.attempt, p.successors, p.more, p.needs)
            for p in answer.accepted
        )
        self._feed(ms.AssignAnswered(time.monotonic(), ins.call, accepted, answer.refused))

    async def _broadcast(self, ins: ms.Broadcast) -> None:
        try:
            result = await self.node.broadcast(TOPIC, ins.payload, timeout=ins.timeout)
        except DhtError as exc:
            self._feed(ms.BroadcastFailed(time.monotonic(), str(exc)))
            return
        now = time.monotonic()
        self._feed(ms.BroadcastEnded(now, result.value, result.elapsed, result.complete))

    async def _solve(self, ins: ms.Solve) -> None:
        # In a thread: a large matrix takes a while, and the node's event loop must go on.
        result, other = await self._tq(self.solver.solve_both, ins.matrix)
        self._feed(ms.Solved(time.monotonic(), result, other))

    async def _deliver(self, ins: ms.Deliver[TaskOffer]) -> None:
        """One try of a hand-out: the task sealed with the worker's key."""
        offer = ins.offer
        task = TaskAssignment(
            offer.task_id,
            ins.attempt,
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
        body = messages.encode(messages.Assign(ins.epoch, task))
        payload = messages.seal(
            ins.key, messages.ASSIGN, ins.pilot_id, ins.epoch, body, time.time()
        )
        outcome = ms.HandOut.LOST
        try:
            answer = await self.node.message(ins.address, messages.ASSIGN, payload)
            value = messages.open_answer(ins.key, messages.ASSIGN, payload[2], answer)
            outcome = ms.HandOut.TAKEN if value is True else ms.HandOut.REFUSED
        except DhtError:
            pass
        except ValueError:  # not the worker's answer (a forgery, or an old pilot)
            pass
        self._feed(ms.HandOutEnded(time.monotonic(), ins.handout, outcome))

    async def _probe(self, ins: machine.Probe) -> None:
        answer = await self.node.ping(ins.address, timeout=PROBE_TIMEOUT)
        self._feed(machine.ProbeEnded(time.monotonic(), ins.pilot_id, answer is not None))

    async def _send(self, ins: ms.Send) -> None:
        message = ins.message
        payload = messages.seal_message(ins.key, message, ins.pilot_id, self.epoch, time.time())
        kind = messages.kind_of(message)
        try:
            await self.node.message(ins.address, kind, payload, timeout=SEND_TIMEOUT)
        except DhtError:
            what = "the resignation" if isinstance(message, messages.Resign) else "its end"
            log.info("master: pilot %s did not answer %s", ins.pilot_id, what)


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
