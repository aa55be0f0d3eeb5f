"""A pilot of a distributed site (Delgado Peris 2014 §III.B-C): the asyncio shell around its pure
core, ``distributed.worker_state.WorkerState``.

The shell owns the I/O and delivers events to the core; the core decides, and the shell carries
out its instructions:

- the ``tasklist`` broadcast: decoded here; the core hears the master (a new epoch: hello, and
  the completions no master said the Task Queue has are resent; those a master holds but has not
  synced, now and then) and says how to answer: busy (its task), or its ranks of the TaskList
  (``sched.ranking.Ranker``: ClassAd Requirements and Rank, its cached inputs, its remaining
  life; the best ``limit``), through the aggregation tree;
- a master's sealed message (``assign``, ``end``, ``resign``): through the core's door
  (``distributed.door``): seal, addressee, epoch (no pilot obeys a master older than the newest
  it knew), freshness; an assignment is queued for the pilot's thread, an ``end`` is checked
  with the Task Queue before the pilot leaves, a ``resign`` starts the election at once;
- the election: a timer asks the core; a silent master is probed, a dead one's successors claim
  the role at the Task Queue in turn; the winner runs
  :class:`~glidein_ext.distributed.master.MasterRole`.

In the pilot's thread (:meth:`DistributedWorker.run_tasks`): wait for an assignment, run it
(the pilot's executor), publish the cache's changes in the DHT, report the completion to the
master and wait for its acknowledgement (the worker is idle only then; until then it says it is
busy, so no task is lost between two masters); the completion stays in the worker's outbox
until a master says the Task Queue has it.  Only the master calls the Task Queue; a worker calls
it to register, to claim the role, to confirm an ``end`` and to deregister.  A leaving pilot
loses no completion: as master it makes a last sync first (:meth:`MasterRole.close`), as a worker
it resends its outbox until a master says the Task Queue has it (``STOP_GRACE`` at most), before
it deregisters.  A master pilot runs no task, but it is not idle while its site has work
(``--max-idle`` counts only an idle site).

Python 3.9, standard library only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

from glidein_ext.cache.need import NeededFiles, needed_files
from glidein_ext.dht.contact import parse_address
from glidein_ext.dht.node import DhtNode
from glidein_ext.distributed import codec, machine
from glidein_ext.distributed import worker_state as ws
from glidein_ext.distributed.master import TOPIC, MasterRole
from glidein_ext.errors import (
    DhtError,
    TaskQueueAuthError,
    TaskQueueError,
    TaskQueueNotFound,
)
from glidein_ext.sched.election import MasterView
from glidein_ext.sched.ranking import Ranker, TaskEntry, WorkerState
from glidein_ext.sched.tasklist import combine, decode_tasklist, encode_reply
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.protocol import Claim, Completion, MasterInfo, RegisterAnswer

log = logging.getLogger("glidein_ext.distributed.worker")
STOP_GRACE = 10.0  # seconds a stopping pilot keeps trying to report its last task
ELECTION_STEP = 0.5  # seconds between the election's looks, at most


class Loop(Protocol):
    """The pilot process's event loop thread (``agent.loopthread``)."""

    def spawn(self, coro: Coroutine[Any, Any, None], name: str = "") -> None: ...

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any: ...


class Network(Protocol):
    """The pilot's DHT node and cache (``agent.sitenet``)."""

    node: DhtNode | None
    cache: Any

    def publish_cache(self, background: bool = False) -> tuple[int, int]: ...

    def refresh(self) -> None: ...


class Executor(Protocol):
    """Runs the pilot's tasks (``agent.executor``)."""

    def has_room(self) -> bool: ...

    def closed(self) -> bool: ...

    def execute(self, task: Any, stop: threading.Event) -> Any: ...


def view_of(master: MasterInfo) -> MasterView:
    """The master the Task Queue named, as the succession knows masters; DhtError if its
    address is malformed."""
    try:
        address = parse_address(master.dht_address)
    except ValueError as exc:
        raise DhtError(str(exc)) from exc
    return MasterView(master.pilot_id, address, master.epoch)


class DistributedWorker:
    """One pilot's part in its site's distributed scheduling: the shell of a ``WorkerState``."""

    def __init__(
        self,
        *,
        loop: Loop,
        net: Network,
        client: TqClient,
        site: str,
        answer: RegisterAnswer,
        ranker: Ranker,
        executor: Executor,
        stop: threading.Event,
        expires_at: float | None,
        master_settings: dict[str, Any],
        on_lost: Callable[[], None],
        needed: NeededFiles | None = None,
    ) -> None:
        """``needed``: where the pilot's needed cached files (``cache.need``) are told, learnt
        from a TaskList now and then (a busy worker reads its tasks only for that)."""
        self.loop = loop
        self.net = net
        self.client = client
        self.site = site
        self.pilot_id = answer.pilot_id
        self.ranker = ranker
        self.executor = executor
        self.stop = stop
        self.expires_at = expires_at
        self.master_settings = master_settings
        self.on_lost = on_lost
        self.needed = needed
        if not answer.pilot_key:
            raise DhtError("the Task Queue gave this pilot no key (an older Task Queue?)")
        node = net.node
        if node is None:
            raise DhtError("the site network is not joined")
        period = float(master_settings["period"])
        # A master is probed after three round periods without a TaskList, and not before the
        # Task Queue would let another pilot take over (a long round under load is no death).
        self.state = ws.WorkerState(
            self.pilot_id,
            bytes.fromhex(answer.pilot_key),
            node.address,
            silence=max(3 * period, float(answer.master_timeout)),
            stagger=2.0,
            patience=max(3 * float(answer.master_timeout), 10.0),
            now=time.monotonic(),
        )
        self.master: MasterRole | None = None
        self.assignments: queue.Queue[Any] = queue.Queue()
        self._sending = 0  # batches of completions on their way (one at a time, but urgent ones)
        self.ran = 0
        self._first_master = answer.master

    # --- start and end ---------------------------------------------------------------------

    def start(self) -> None:
        """Take the broadcasts and messages; start the election; meet the master."""
        node = self.net.node
        assert node is not None
        node.register_broadcast(TOPIC, self._on_tasklist, combine)
        for kind in codec.TO_WORKER:
            node.register_message(kind, functools.partial(self._on_message, kind))
        self.loop.spawn(self._elect(), name=f"election-{self.pilot_id}")
        master = self._first_master
        if master is not None and master.pilot_id == self.pilot_id:
            self.loop.run(self._do(self.state.granted(master.epoch, (), time.monotonic())))
        elif master is not None:
            self.loop.run(self._handle(ws.Named(time.monotonic(), view_of(master))))

    def leave(self) -> None:
        """A normal exit: tell the master (bye), stop the master role if held."""
        self.stop.set()
        self.state.stopping = True
        self.loop.run(self._leave())

    async def _leave(self) -> None:
        if self.master is not None and self.master.active:
            # Its own completions and those its workers sent it reach the Task Queue first.
            if not await self.master.close(STOP_GRACE):
                log.warning(
                    "pilot %s: leaving the master role without its last sync", self.pilot_id
                )
        else:
            await self._flush(STOP_GRACE)
        view = self.state.master
        if view is not None and view.pilot_id != self.pilot_id and self.net.node is not None:
            try:
                await self._request(view, codec.Bye(self.pilot_id), timeout=0.5)
            except DhtError:
                log.info("the master did not answer our bye")

    async def _flush(self, grace: float) -> None:
        """Before a worker leaves (and deregisters, which requeues what the Task Queue thinks it
        holds): resend its completions no master said the Task Queue has, until one says so or
        ``grace`` runs out.  Whatever is left stays unreported (logged)."""
        outbox = self.state.outbox
        end = time.monotonic() + grace
        while len(outbox) and time.monotonic() < end:
            view = self.state.master
            if view is not None and view.pilot_id != self.pilot_id:
                await self._do(self.state.resend(time.monotonic()), urgent=True)
            if not len(outbox):
                return
            await asyncio.sleep(0.5)  # the master's next sync, or the next master
        if len(outbox):
            log.warning(
                "pilot %s: leaving with %d completion(s) the Task Queue may lack",
                self.pilot_id,
                len(outbox),
            )

    # --- events in, instructions out (on the event loop) ------------------------------------

    async def _handle(self, event: ws.Event) -> None:
        await self._do(self.state.handle(event))

    async def _do(self, instructions: Sequence[ws.Instruction], urgent: bool = False) -> None:
        """Carry out the core's instructions (those that answer a handler are taken there).
        Completions go one batch at a time, but for ``urgent`` ones (the pilot's report)."""
        sends = [i for i in instructions if isinstance(i, ws.SendDone)]
        for instruction in instructions:
            if isinstance(instruction, ws.Run):
                self.assignments.put(instruction.task)
            elif isinstance(instruction, ws.Meet):
                self.loop.spawn(self._meet(instruction), name=f"hello-{self.pilot_id}")
            elif isinstance(instruction, ws.CheckEnd):
                self.loop.spawn(self._check_end(instruction), name=f"end-{self.pilot_id}")
            elif isinstance(instruction, machine.Probe):
                await self._probe(instruction)
            elif isinstance(instruction, ws.Claim):
                await self._claim(instruction)
            elif isinstance(instruction, ws.BecomeMaster):
                self._become_master(instruction)
            elif isinstance(instruction, ws.OwnDone):
                if self.master is not None:
                    self.master.local_done(self.pilot_id, instruction.completion)
            elif isinstance(instruction, ws.Leave):
                self.on_lost()
            elif isinstance(instruction, machine.Log):
                log.log(instruction.level, "%s", instruction.message)
        if sends and (urgent or self._sending == 0):
            await self._send(sends)

    def _on_tasklist(self, payload: Any) -> Any:
        busy = self.state.busy
        learn = self.needed is not None and self.needed.due(time.monotonic())
        try:  # a busy worker reads no tasks (it ranks none) but now and then for ``needed``
            tasklist = decode_tasklist(payload, with_tasks=not busy or learn)
        except ValueError as exc:
            log.info("malformed TaskList: %s", exc)
            return None
        view = MasterView(tasklist.master, tasklist.address, tasklist.epoch)
        room = self.executor.has_room()
        now = time.monotonic()
        event = ws.Heard(now, view, tuple(tasklist.successors), room)
        instructions = self.state.handle(event)
        self.loop.spawn(self._do(instructions), name=f"heard-{self.pilot_id}")
        if learn and self.needed is not None and instructions[-1] != machine.Answer(None):
            wanted = {f.lfn for entry in tasklist.tasks for f in entry.inputs}
            held = ((e.lfn, e.size) for e in self.net.cache.store.entries())
            self.needed.learn(needed_files(wanted, held), time.time())
        reply = instructions[-1]
        if isinstance(reply, ws.ReplyBusy):
            return encode_reply(self.pilot_id, reply.task_id, reply.last_done, None)
        if not isinstance(reply, ws.Rank):
            return None  # a stale master's TaskList
        remaining = math.inf if self.expires_at is None else self.expires_at - time.time()
        state = WorkerState(remaining=remaining, cached=frozenset(self.net.cache.lfns()))
        entries = [TaskEntry(i, e.spec, e.inputs) for i, e in enumerate(tasklist.tasks)]
        ranking = self.ranker.rank(entries, state, limit=tasklist.limit, spread=self.pilot_id)
        return encode_reply(self.pilot_id, 0, reply.last_done, ranking)

    def _on_message(self, kind: str, payload: Any, _sender: int, _address: Any) -> Any:
        """A master's sealed message (assign, end, resign): its sealed answer, or False."""
        can_run = not (self.stop.is_set() or self.executor.closed())
        event = ws.Arrived(time.monotonic(), kind, payload, time.time(), can_run)
        instructions = self.state.handle(event)
        answer = next(i for i in instructions if isinstance(i, machine.Answer))
        rest = [i for i in instructions if not isinstance(i, machine.Answer)]
        if rest:
            self.loop.spawn(self._do(rest), name=f"{kind}-{self.pilot_id}")
        return answer.value

    # --- carrying out ------------------------------------------------------------------------

    async def _request(self, view: MasterView, message: Any, timeout: float | None = None) -> Any:
        """Send the master a sealed message: its answer's value, None (not the master) or
        ``"pending"``; DhtError when no (sealed) answer came."""
        node = self.net.node
        if node is None:
            raise DhtError("the site network is not joined")
        kind = codec.kind_of(message)
        key = self.state.door.key_for(view.epoch)
        payload = codec.seal_message(key, message, self.pilot_id, view.epoch, time.time())
        answer = await node.message(view.address, kind, payload, timeout=timeout)
        if answer is None or answer == codec.PENDING:
            return answer
        try:
            return codec.open_answer(key, kind, payload[2], answer)
        except ValueError as exc:
            raise DhtError(f"{exc} (from {view.address})") from exc

    async def _meet(self, meet: ws.Meet) -> None:
        try:
            answer = await self._request(meet.master, meet.hello)
        except DhtError:
            return  # the election probes a silent master
        await self._handle(ws.Greeted(time.monotonic(), meet, answer))

    async def _send(self, sends: Sequence[ws.SendDone]) -> None:
        """Completions to a master, one after the other: the first without an answer, or
        refused as not the master's, leaves the rest for later."""
        self._sending += 1
        try:
            for send in sends:
                try:
                    answer = await self._request(send.master, send.done)
                except DhtError:
                    answer = ws.NO_ANSWER
                await self._handle(ws.Acked(time.monotonic(), send.key, answer))
                if answer is None or answer is ws.NO_ANSWER:
                    return
        finally:
            self._sending -= 1

    async def _check_end(self, check: ws.CheckEnd) -> None:
        """Whether the Task Queue still has this pilot (a master says it has not, or holds its
        hellos for a key): the Task Queue says."""
        gone: bool | None = False
        try:
            await self._tq(self.client.heartbeat, self.pilot_id)
        except (TaskQueueNotFound, TaskQueueAuthError):
            gone = True
        except TaskQueueError as exc:  # not obeyed on a master's word alone: asked again
            log.warning("pilot %s: the Task Queue did not confirm: %s", self.pilot_id, exc)
            gone = None
        await self._handle(ws.EndChecked(time.monotonic(), check, gone))

    async def _tq(self, call: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(call, *args))

    async def _elect(self) -> None:
        """The election (Delgado Peris 2014 §III.B): a silent master is probed; when it is
        dead, the successors claim the role at the Task Queue in turn."""
        while not self.stop.is_set():
            now = time.monotonic()
            await self._do(self.state.handle(machine.Tick(now)))
            wait = self.state.next_tick(time.monotonic())
            await asyncio.sleep(min(ELECTION_STEP, max(0.05, wait)))

    async def _probe(self, probe: machine.Probe) -> None:
        node = self.net.node
        if node is None:
            return
        alive = await node.ping(probe.address) is not None
        if alive:
            self.net.refresh()  # its TaskLists miss us: make ourselves known
        await self._handle(machine.ProbeEnded(time.monotonic(), probe.pilot_id, alive))

    async def _claim(self, claim: ws.Claim) -> None:
        node = self.net.node
        if node is None:
            await self._handle(ws.ClaimAnswered(time.monotonic(), False, None, ()))
            return
        unreachable = []
        for pilot, address in claim.lower:
            if address is None or await node.ping(address) is None:
                unreachable.append(pilot)
        try:
            answer = await self._tq(
                self.client.claim_master, self.site, Claim(self.pilot_id, tuple(unreachable))
            )
        except TaskQueueNotFound:
            lost = "the Task Queue forgot it"
        except TaskQueueAuthError as exc:  # revoked: its task is requeued already
            lost = f"the Task Queue refuses it ({exc})"
        except TaskQueueError as exc:
            log.warning("pilot %s: claiming the master role failed: %s", self.pilot_id, exc)
            await self._handle(ws.ClaimAnswered(time.monotonic(), False, None, ()))
            return
        else:
            named = None
            if answer.master is not None:
                try:
                    named = view_of(answer.master)
                except DhtError as exc:
                    log.warning("pilot %s: %s", self.pilot_id, exc)
            event = ws.ClaimAnswered(time.monotonic(), answer.granted, named, answer.pilots)
            await self._handle(event)
            return
        log.warning("pilot %s: %s; stopping", self.pilot_id, lost)
        await self._handle(ws.ClaimAnswered(time.monotonic(), False, None, (), lost=lost))

    def _become_master(self, become: ws.BecomeMaster) -> None:
        node = self.net.node
        assert node is not None
        role = MasterRole(
            node,
            self.client,
            self.site,
            self.pilot_id,
            become.epoch,
            on_step_down=lambda reason: self.on_lost(),
            **self.master_settings,
        )
        role.install(become.pilots)
        for _, completion in become.unsynced:  # what no master synced: its own now
            role.local_done(self.pilot_id, completion)
        if become.lost is not None:  # listed as its own, never received: the TQ requeues it
            log.info(
                "pilot %s: task %s never reached this pilot; released", self.pilot_id, become.lost
            )
            role.release_undelivered(become.lost, self.pilot_id)
        self.master = role
        self.loop.spawn(role.run(), name=f"master-{self.pilot_id}")

    def site_busy(self) -> bool:
        """Whether this pilot is the master of a site with work: it is not idle then."""
        master = self.master
        return master is not None and master.active and master.busy()

    # --- the pilot's thread ----------------------------------------------------------------

    def run_tasks(self, max_tasks: int | None, max_idle: float | None) -> int:
        """Run what the master assigns until stopped; the number of tasks run.  ``max_idle``:
        seconds without a task (and, for a master, without work at its site) before it leaves."""
        idle_since = time.monotonic()
        while not self.stop.is_set():
            if max_tasks is not None and self.ran >= max_tasks:
                break
            if self.executor.closed() and self.state.current is None:
                break  # its glidein retires: no more tasks
            try:
                task = self.assignments.get(timeout=0.2)
            except queue.Empty:
                if self.site_busy():
                    idle_since = time.monotonic()
                elif max_idle is not None and time.monotonic() - idle_since > max_idle:
                    break
                continue
            log.info("pilot %s: running task %s (%s)", self.pilot_id, task.task_id, task.name)
            execution = self.executor.execute(task, self.stop)
            key = (task.task_id, task.attempt)
            if self.stop.is_set() and execution.outcome.exit_code != 0:
                break  # interrupted: the deregistration requeues it
            if execution.evicted:
                self.loop.run(self._handle(ws.GaveBack(time.monotonic(), key)))
                idle_since = time.monotonic()
                continue
            ended = time.monotonic()
            try:  # in the background, while the completion is reported (SiteNetwork)
                self.net.publish_cache(background=True)
            except DhtError as exc:
                log.warning("publishing the cache failed: %s", exc)
            published = time.monotonic()
            self._report(execution.completion())
            log.info(
                "pilot %s: task %s published in %.3f s, reported in %.3f s",
                self.pilot_id,
                task.task_id,
                published - ended,
                time.monotonic() - published,
            )
            self.ran += 1
            idle_since = time.monotonic()
        return self.ran

    def _report(self, completion: Completion) -> None:
        """Hand the completion to the master and wait for its acknowledgement.  It stays in the
        outbox (resent to each new master, and now and then) until a master says the Task Queue
        has it: a master that steps down holding it loses nothing."""
        key = (completion.task_id, completion.attempt)
        stopping_since: float | None = None
        while True:
            try:
                ended = ws.Ended(time.monotonic(), completion)
                self.loop.run(self._do(self.state.handle(ended), urgent=True), 30.0)
            except Exception as exc:  # noqa: BLE001 -- a report is retried, never fatal: logged
                log.warning("pilot %s: reporting failed: %s", self.pilot_id, exc)
            if self.state.acknowledged(key):
                break
            if self.stop.is_set():
                stopping_since = stopping_since or time.monotonic()
                if time.monotonic() - stopping_since > STOP_GRACE:
                    log.warning("pilot %s: leaving with task %s unreported", self.pilot_id, key[0])
                    break
            time.sleep(0.2)
        self.loop.run(self._finish(key))

    async def _finish(self, key: tuple[int, int]) -> None:
        self.state.finish(key)  # on the loop, as every use of the core
