"""A pilot of a distributed site (Delgado Peris 2014 §III.B-C): ranks TaskLists, runs what the
master assigns, reports to the master, and takes the master role when the election says so.

On the process's event loop (owned here, cancelled at the end):

- the ``tasklist`` broadcast: the worker hears its master (``sched.election.Succession``; a new
  epoch makes it say hello and resend the completions the Task Queue may lack, ``sched.outbox``;
  those a master holds but has not synced are resent now and then) and answers: busy (its task), or
  its ranks of the TaskList (``sched.ranking.Ranker``: ClassAd Requirements and Rank, its cached
  inputs, its remaining life; the best ``limit``) through the aggregation tree;
- the ``assign`` message: the task is queued for the pilot's thread;
- the election (``distributed.election``): a silent master is probed; when it is dead, the
  successors claim the role at the Task Queue in turn; the winner runs
  :class:`~glidein_ext.distributed.master.MasterRole`.

In the pilot's thread (:meth:`DistributedWorker.run_tasks`): wait for an assignment, run it
(``agent.executor``), publish the cache's changes in the DHT, report the completion to the master
and wait for its acknowledgement (the worker is idle only then; until then it says it is busy, so
no task is lost between two masters); the completion stays in the worker's outbox until a master
says the Task Queue has it.  Only the master calls the Task Queue; a worker calls it to
register, to claim the role, and to deregister.  A leaving pilot loses no completion: as master
it makes a last sync first (:meth:`MasterRole.close`), as a worker it resends its outbox until a
master says the Task Queue has it (``STOP_GRACE`` at most), before it deregisters.

What the worker and its master tell each other is sealed with the key that only this pilot and
the master of that epoch hold (``distributed.masterlink``, ``tq.client.pilotkeys``): an
assignment or an ``end`` that is not, or that replays a nonce, is refused, and an answer that
is not is no answer (only the real master can say the Task Queue has a completion).  A master's
``end`` (the Task Queue no longer has this pilot: its credential was revoked) makes the pilot
leave.

Python 3.9, standard library only.
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from glidein_ext.agent.executor import TaskExecutor
from glidein_ext.agent.loopthread import LoopThread
from glidein_ext.agent.sitenet import SiteNetwork
from glidein_ext.cache.need import NeededFiles, needed_files
from glidein_ext.distributed import codec as messages
from glidein_ext.distributed.election import Election, view_of
from glidein_ext.distributed.master import TOPIC, MasterRole
from glidein_ext.distributed.masterlink import MasterLink
from glidein_ext.errors import DhtError
from glidein_ext.sched.election import MasterView, Succession, lost_own_task
from glidein_ext.sched.outbox import Outbox
from glidein_ext.sched.ranking import Ranker, TaskEntry, WorkerState
from glidein_ext.sched.tasklist import combine, decode_tasklist, encode_reply
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.protocol import Completion, RegisterAnswer, TaskAssignment

log = logging.getLogger("glidein_ext.distributed.worker")
RESEND_AFTER = 3.0  # seconds before a completion no master said the Task Queue has is resent
STOP_GRACE = 10.0  # seconds a stopping pilot keeps trying to report its last task


class DistributedWorker:
    """One pilot's part in its site's distributed scheduling."""

    def __init__(
        self,
        *,
        loop: LoopThread,
        net: SiteNetwork,
        client: TqClient,
        site: str,
        answer: RegisterAnswer,
        ranker: Ranker,
        executor: TaskExecutor,
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
        period = float(master_settings["period"])
        # A master is probed after three round periods without a TaskList, and not before the
        # Task Queue would let another pilot take over (a long round under load is no death).
        self.succession = Succession(
            self.pilot_id,
            silence=max(3 * period, float(answer.master_timeout)),
            stagger=2.0,
            patience=max(3 * float(answer.master_timeout), 10.0),
            now=time.monotonic(),
        )
        self.election = Election(
            pilot_id=self.pilot_id,
            site=site,
            client=client,
            net=net,
            succession=self.succession,
            stop=stop,
            on_lost=on_lost,
            meet=self._meet,
            adopt=self._adopt,
            become_master=self._become_master,
        )
        self.master: MasterRole | None = None
        self.assignments: queue.Queue[TaskAssignment] = queue.Queue()
        self.current: tuple[int, int] | None = None  # (task, attempt) running or reporting
        self.last_done = 0
        # The last (task, attempt)s it ran: a resent assignment of one (its first answer came
        # late to the master, which sent it again) is acknowledged, never run twice.
        self.finished: deque[tuple[int, int]] = deque(maxlen=16)
        self.outbox = Outbox(RESEND_AFTER)  # on the loop only
        self._resending = False
        self.ran = 0
        self._first_master = answer.master
        if not answer.pilot_key:
            raise DhtError("the Task Queue gave this pilot no key (an older Task Queue?)")
        self.link = MasterLink(net, self.pilot_id, bytes.fromhex(answer.pilot_key))

    # --- start and end ---------------------------------------------------------------------

    def start(self) -> None:
        """Take the broadcasts and messages; start the election loop; meet the master."""
        node = self.net.node
        assert node is not None
        node.register_broadcast(TOPIC, self._on_tasklist, combine)
        node.register_message(messages.ASSIGN, self._on_assign)
        node.register_message(messages.END, self._on_end)
        node.register_message(messages.RESIGN, self._on_resign)
        self.loop.spawn(self.election.run(), name=f"election-{self.pilot_id}")
        master = self._first_master
        if master is not None and master.pilot_id == self.pilot_id:
            self.loop.run(self._become_master(master.epoch, ()))
        elif master is not None:
            self.loop.run(self._adopt(view_of(master)))

    def leave(self) -> None:
        """A normal exit: tell the master (bye), stop the master role if held."""
        self.stop.set()
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
        view = self.succession.master
        node = self.net.node
        if view is not None and view.pilot_id != self.pilot_id and node is not None:
            try:
                await self.link.request(view, messages.BYE, [self.pilot_id], timeout=0.5)
            except DhtError:
                log.info("the master did not answer our bye")

    async def _flush(self, grace: float) -> None:
        """Before a worker leaves (and deregisters, which requeues what the Task Queue thinks it
        holds): resend its completions no master said the Task Queue has, until one says so or
        ``grace`` runs out.  Whatever is left stays unreported (logged)."""
        end = time.monotonic() + grace
        while len(self.outbox) and time.monotonic() < end:
            view = self.succession.master
            if view is not None and view.pilot_id != self.pilot_id:
                await self._resend(view, due=False)
            if not len(self.outbox):
                return
            await asyncio.sleep(0.5)  # the master's next sync, or the next master
        if len(self.outbox):
            log.warning(
                "pilot %s: leaving with %d completion(s) the Task Queue may lack",
                self.pilot_id,
                len(self.outbox),
            )

    # --- the event loop's side --------------------------------------------------------------

    def _on_tasklist(self, payload: Any) -> Any:
        running = self.current  # read once: the pilot's thread clears it
        busy = running is not None or self.master is not None
        learn = self.needed is not None and self.needed.due(time.monotonic())
        try:  # a busy worker reads no tasks (it ranks none) but now and then for ``needed``
            tasklist = decode_tasklist(payload, with_tasks=not busy or learn)
        except ValueError as exc:
            log.info("malformed TaskList: %s", exc)
            return None
        view = MasterView(tasklist.master, tasklist.address, tasklist.epoch)
        known = self.succession.master
        successors = [pilot for pilot, _ in tasklist.successors]
        if not self.succession.heard(view, time.monotonic(), successors):
            return None  # a stale master's TaskList
        self.link.door.know_epoch(view.epoch)  # its elders are obeyed no more
        self.election.addresses.update(dict(tasklist.successors))
        if learn and self.needed is not None:  # sizes: the cache's (the TaskList has none)
            wanted = {f.lfn for entry in tasklist.tasks for f in entry.inputs}
            held = ((e.lfn, e.size) for e in self.net.cache.store.entries())
            self.needed.learn(needed_files(wanted, held), time.time())
        if known is None or known.epoch != view.epoch:
            self.loop.spawn(self._meet(view), name=f"hello-{self.pilot_id}")
        elif not self._resending and self.outbox.due(time.monotonic()):
            self.loop.spawn(self._resend(view, due=True), name=f"resend-{self.pilot_id}")
        if busy:
            current = running[0] if running is not None else -1
            return encode_reply(self.pilot_id, current, self.last_done, None)
        if not self.executor.has_room():  # idle, but its startd could not start a task now
            return encode_reply(self.pilot_id, 0, self.last_done, None)
        state = WorkerState(
            remaining=math.inf if self.expires_at is None else self.expires_at - time.time(),
            cached=frozenset(self.net.cache.lfns()),
        )
        entries = [TaskEntry(i, e.spec, e.inputs) for i, e in enumerate(tasklist.tasks)]
        ranking = self.ranker.rank(entries, state, limit=tasklist.limit, spread=self.pilot_id)
        return encode_reply(self.pilot_id, 0, self.last_done, ranking)

    def _on_assign(self, payload: Any, _sender: int, _address: Any) -> Any:
        admitted = self.link.opened(messages.ASSIGN, payload)
        if admitted is None or not isinstance(admitted.message, messages.Assign):
            return False
        return admitted.answer(self._take(admitted.epoch, admitted.message.task))

    def _on_end(self, payload: Any, _sender: int, _address: Any) -> Any:
        """The master says the Task Queue no longer has this pilot (its credential was revoked,
        or it was found dead): its task is requeued already; the pilot leaves."""
        admitted = self.link.opened(messages.END, payload)
        if admitted is None or not isinstance(admitted.message, messages.End):
            return False
        log.warning(
            "pilot %s: the master of epoch %s says: %s; stopping",
            self.pilot_id,
            admitted.epoch,
            admitted.message.reason,
        )
        self.on_lost()
        return admitted.answer(True)

    def _on_resign(self, payload: Any, _sender: int, _address: Any) -> Any:
        """The master leaves (its last sync made): the election starts now, the first
        successor claiming at once (the Task Queue grants it once the master deregistered)."""
        admitted = self.link.opened(messages.RESIGN, payload)
        if admitted is None or not isinstance(admitted.message, messages.Resign):
            return False
        successors = admitted.message.successors
        known = self.succession.master
        if known is not None and known.epoch == admitted.epoch:
            log.info("pilot %s: the master of epoch %s leaves", self.pilot_id, admitted.epoch)
            # Its order may be news: a pilot that joined after the last TaskList knew none.
            self.election.addresses.update(dict(successors))
            ids = [pilot for pilot, _ in successors]
            self.succession.forget(time.monotonic(), ids if ids else None)
        return admitted.answer(True)

    def _take(self, epoch: int, task: TaskAssignment) -> bool:
        known = self.succession.master
        if known is not None and epoch < known.epoch:
            return False  # from a master that lost the role
        if (task.task_id, task.attempt) in self.finished:
            return True  # a resend of one it ran already
        if self.current is not None:
            return self.current == (task.task_id, task.attempt)  # a resend is fine
        if self.stop.is_set() or self.master is not None or self.executor.closed():
            return False
        self.current = (task.task_id, task.attempt)
        self.assignments.put(task)
        return True

    async def _adopt(self, view: MasterView) -> None:
        """The master the Task Queue named (on the loop, like every use of the succession)."""
        self.succession.adopt(view, time.monotonic())
        self.link.door.know_epoch(view.epoch)
        await self._meet(view)

    async def _meet(self, view: MasterView, resend: bool = True) -> None:
        """Say hello to a (new) master and resend the recent completions it may lack."""
        node = self.net.node
        if node is None or view.pilot_id == self.pilot_id:
            return
        task, attempt = self.current or (0, 0)
        hello = messages.Hello(self.pilot_id, node.address, task, attempt)
        try:
            answer = await self.link.request(view, messages.HELLO, messages.encode(hello))
        except DhtError:
            return  # the election loop probes a silent master
        if answer is None:
            self.succession.forget(time.monotonic())
            return
        if resend:
            await self._resend(view, due=False)

    async def _resend(self, view: MasterView, due: bool) -> None:
        """Send the master the completions no master said the Task Queue has (``due``: only
        those not sent for a while); forget those it says the Task Queue has."""
        node = self.net.node
        if node is None or self._resending or view.pilot_id == self.pilot_id:
            return
        self._resending = True
        try:
            now = time.monotonic()
            items = self.outbox.due(now) if due else self.outbox.everything()
            for key, completion in items:
                self.outbox.sent(key, now)
                try:
                    answer = await self.link.request(view, messages.DONE, self._done(completion))
                except DhtError:
                    return  # kept: resent later
                if answer is None:
                    return  # not the master (any more): the next one gets them
                if answer == messages.DONE_SYNCED:
                    self.outbox.acked(key)
        finally:
            self._resending = False

    def _done(self, completion: Completion) -> list[Any]:
        return messages.encode(messages.Done(self.pilot_id, completion))

    async def _become_master(self, epoch: int, pilots: Any) -> None:
        node = self.net.node
        assert node is not None
        self.succession.granted(epoch, node.address, time.monotonic())
        self.link.door.know_epoch(epoch)
        role = MasterRole(
            node,
            self.client,
            self.site,
            self.pilot_id,
            epoch,
            on_step_down=lambda reason: self.on_lost(),
            **self.master_settings,
        )
        role.install(pilots)
        unsynced = self.outbox.everything()
        for _, completion in unsynced:  # what no master synced: ours now
            role.local_done(self.pilot_id, completion)
        running = self.current  # read once: the pilot's thread clears it
        listed = next((p.task_id for p in pilots if p.pilot_id == self.pilot_id), None)
        held = {key[0] for key, _ in unsynced}
        lost = lost_own_task(listed, running[0] if running else None, held)
        if lost is not None:  # listed as ours, never received: the Task Queue requeues it
            log.info("pilot %s: task %s never reached this pilot; released", self.pilot_id, lost)
            role.book.undelivered(lost, self.pilot_id)
        self.master = role
        self.loop.spawn(role.run(), name=f"master-{self.pilot_id}")

    # --- the pilot's thread ----------------------------------------------------------------

    def run_tasks(self, max_tasks: int | None, max_idle: float | None) -> int:
        """Run what the master assigns until stopped; the number of tasks run."""
        idle_since = time.monotonic()
        while not self.stop.is_set():
            if max_tasks is not None and self.ran >= max_tasks:
                break
            if self.executor.closed() and self.current is None:
                break  # its glidein retires: no more tasks
            try:
                task = self.assignments.get(timeout=0.2)
            except queue.Empty:
                if max_idle is not None and time.monotonic() - idle_since > max_idle:
                    break
                continue
            log.info("pilot %s: running task %s (%s)", self.pilot_id, task.task_id, task.name)
            execution = self.executor.execute(task, self.stop)
            if self.stop.is_set() and execution.outcome.exit_code != 0:
                break  # interrupted: the deregistration requeues it
            if execution.evicted:
                # Not the task's fault: no report.  The worker says it is idle without having
                # finished it, so the master releases it (the Task Queue requeues it).
                log.info("pilot %s: task %s given back", self.pilot_id, task.task_id)
                self.current = None
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
        stopping_since: float | None = None
        while True:
            try:
                if self.loop.run(self._send_done(completion), 30.0):
                    break
            except Exception as exc:  # noqa: BLE001 -- a report is retried, never fatal: logged
                log.warning("pilot %s: reporting failed: %s", self.pilot_id, exc)
            if self.stop.is_set():
                stopping_since = stopping_since or time.monotonic()
                if time.monotonic() - stopping_since > STOP_GRACE:
                    log.warning(
                        "pilot %s: leaving with task %s unreported",
                        self.pilot_id,
                        completion.task_id,
                    )
                    break
            time.sleep(0.2)
        self.last_done = completion.task_id
        self.finished.append((completion.task_id, completion.attempt))
        self.current = None

    async def _send_done(self, completion: Completion) -> bool:
        if self.master is not None and self.master.active:
            self.master.local_done(self.pilot_id, completion)
            return True
        key = (completion.task_id, completion.attempt)
        if key not in self.outbox:  # before it is sent: a new master met meanwhile gets it
            self.outbox.add(key, completion, time.monotonic())
        view, node = self.succession.master, self.net.node
        if view is None or node is None or view.pilot_id == self.pilot_id:
            return False
        self.outbox.sent(key, time.monotonic())
        try:
            answer = await self.link.request(view, messages.DONE, self._done(completion))
        except DhtError:
            return False
        if answer is None:  # not the master any more
            self.succession.forget(time.monotonic())
            return False
        if answer == messages.DONE_SYNCED:
            self.outbox.acked(key)
            return True
        return answer is True
