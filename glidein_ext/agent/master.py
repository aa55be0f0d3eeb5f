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
probe are reported dead.  A call refused as stale (another pilot holds the role) ends the role.

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
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from glidein_ext.agent import messages
from glidein_ext.dht import wire
from glidein_ext.dht.node import DhtNode
from glidein_ext.dht.protocol import BODY_BUDGET
from glidein_ext.errors import DhtError, MissingDependencyError, StaleMasterError, TaskQueueError
from glidein_ext.sched.assign import assign
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
    Assignment,
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
log = logging.getLogger("glidein_ext.agent.master")
TASKLIST_BUDGET = BODY_BUDGET - 256  # the broadcast's own fields
REPLY_BUDGET = int(BODY_BUDGET * 0.85)  # the aggregated replies, in one datagram at the root
TOPIC = "tasklist"


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
        method: str = "optimal",
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
            self.book.join(pilot.pilot_id, address, now, task)
        self.node.register_message(messages.HELLO, self._on_hello)
        self.node.register_message(messages.DONE, self._on_done)
        self.node.register_message(messages.BYE, self._on_bye)

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _on_hello(self, payload: Any, _sender: int, _address: Any) -> Any:
        if not self.active:
            return None
        try:
            hello = messages.decode_hello(payload)
        except ValueError as exc:
            log.info("malformed hello: %s", exc)
            return None
        task = (hello.task_id, hello.attempt) if hello.task_id else None
        self.book.join(hello.pilot_id, hello.address, time.monotonic(), task)
        self._poke()
        return [self.epoch]

    def _on_done(self, payload: Any, _sender: int, _address: Any) -> Any:
        if not self.active:
            return None
        try:
            pilot_id, completion = messages.decode_done(payload)
        except ValueError as exc:
            log.info("malformed completion: %s", exc)
            return None
        self.local_done(pilot_id, completion)
        if self.book.synced((completion.task_id, completion.attempt)):
            return messages.DONE_SYNCED  # the worker stops resending it
        return True

    def local_done(self, pilot_id: int, completion: Completion) -> None:
        """A completion, from a worker or from this pilot's own last task."""
        key = (completion.task_id, completion.attempt)
        if self.book.completed(pilot_id, key, completion, time.monotonic()):
            self._poke()

    def _on_bye(self, payload: Any, _sender: int, _address: Any) -> Any:
        if not self.active or not isinstance(payload, list) or len(payload) != 1:
            return None
        self.book.leave(int(payload[0]))
        return True

    # --- the rounds ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Rounds until the role ends (a stale call) or the task is cancelled."""
        self._wake = asyncio.Event()
        log.info("pilot %s is the master of %s (epoch %s)", self.pilot_id, self.site, self.epoch)
        while self.active:
            now = time.monotonic()
            if self.book.round_due(now):
                await self._round(now)
            elif self.book.call_due(now):
                await self._sync(self.book.take_report(now), 0)
            else:
                self._wake.clear()
                wait = self.book.next_wakeup(time.monotonic())
                with contextlib.suppress(asyncio.TimeoutError):  # time for a round or a call
                    await asyncio.wait_for(self._wake.wait(), timeout=max(wait, 0.01))

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
        )
        try:
            answer = await self._tq(self.client.sync, self.site, call)
        except StaleMasterError as exc:
            self._step_down(str(exc))
            return None
        except TaskQueueError as exc:
            log.warning("master: the Task Queue call failed (kept for the next one): %s", exc)
            self.book.unreported(report)
            return None
        self.book.reported()
        if answer.queued > len(answer.tasks):
            self.book.trigger(time.monotonic())  # more runnable than asked for: another round
        return list(answer.tasks)

    async def _round(self, now: float) -> None:
        want = self.book.start_round(now)
        offers: list[TaskOffer] = []
        if want or self.book.call_due(now):
            got = await self._sync(self.book.take_report(now), want)
            if not self.active:
                return
            offers = got or []
        synced_at = time.monotonic()
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
        try:
            result = await self.node.broadcast(TOPIC, payload, timeout=self.broadcast_timeout)
        except DhtError as exc:
            log.error("master: the TaskList could not be broadcast: %s", exc)
            return
        replies = decode_replies(result.value, fitted)
        candidates = self.book.replies(replies)
        offered = offers[:fitted]
        broadcast_at = time.monotonic()
        if offered and candidates.pilots:
            await self._assign(offered, candidates, idle)
        log.info(
            "master: round %d: %d task(s) offered to %d idle pilot(s) of %d that answered; "
            "sync %.3f s, broadcast %.3f s, assign %.3f s",
            self.book.round,
            len(offered),
            len(candidates.pilots),
            len(replies),
            synced_at - now,
            broadcast_at - synced_at,
            time.monotonic() - broadcast_at,
        )
        await self._probe_suspects()

    def _solve(self, matrix: RankMatrix) -> Any:
        try:
            return assign(matrix, self.method)
        except MissingDependencyError as exc:
            log.warning("master: %s; assigning with greedy instead", exc)
            self.method = "greedy"
            return assign(matrix, "greedy")

    def _compare(self, matrix: RankMatrix, method: str) -> Any:
        """The other method on the same matrix, for the counters (None without scipy)."""
        try:
            return assign(matrix, "greedy" if method == "optimal" else "optimal")
        except MissingDependencyError:
            return None

    async def _assign(self, offered: list[TaskOffer], candidates: Any, idle: int) -> None:
        matrix = RankMatrix.from_replies(
            list(range(len(offered))), list(candidates.ranks), candidates.truncated
        )
        result = self._solve(matrix)
        pairs = tuple(
            Pair(offered[row].task_id, candidates.pilots[col]) for row, col in result.pairs
        )
        other = self._compare(matrix, result.method)
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
        started = time.monotonic()
        try:
            answer = await self._tq(self.client.assign, self.site, call)
        except StaleMasterError as exc:
            self._step_down(str(exc))
            return
        except TaskQueueError as exc:
            log.warning("master: assign failed (the tasks stay queued): %s", exc)
            return
        self.rank_sums.append(result.total)
        placed = [(p.task_id, p.pilot_id, p.attempt) for p in answer.accepted]
        self.book.assigned(placed)
        by_id = {offer.task_id: offer for offer in offered}
        told = time.monotonic()
        await asyncio.gather(*(self._deliver(by_id[t], p, a) for t, p, a in placed))
        log.info(
            "master: %d assignment(s) accepted in %.3f s, delivered in %.3f s",
            len(placed),
            told - started,
            time.monotonic() - told,
        )

    async def _deliver(self, offer: TaskOffer, pilot_id: int, attempt: int) -> None:
        worker = self.book.workers.get(pilot_id)
        task = Assignment(
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
        payload = messages.encode_assign(self.epoch, task)
        for _ in range(3):
            if worker is None:
                break
            try:
                if await self.node.message(worker.address, messages.ASSIGN, payload) is True:
                    return
                break  # refused: busy with another task, or it knows a newer master
            except DhtError:
                continue
        log.info("master: task %s did not reach pilot %s; released", offer.task_id, pilot_id)
        self.book.undelivered(offer.task_id, pilot_id)

    async def _probe_suspects(self) -> None:
        for worker in self.book.suspects():
            if await self.node.ping(worker.address) is None:
                log.info("master: pilot %s is dead", worker.pilot_id)
                self.book.dead(worker.pilot_id)
            else:
                self.book.alive(worker.pilot_id)

    def _step_down(self, reason: str) -> None:
        log.warning("master: pilot %s steps down: %s", self.pilot_id, reason)
        self.active = False
        self.on_step_down(reason)
