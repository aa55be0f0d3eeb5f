"""What the master sends its workers besides the TaskList (Delgado Peris 2014 §III.C): each task
a round assigned (the hand-out, sealed with the worker's key, retried; one that does not arrive
is released, one left unanswered is told to the book), and a probe of each suspect (a worker
that missed rounds).  Both run beside the rounds, in tasks owned here: a round neither waits for
its hand-outs nor for its probes.

Python 3.9, standard library only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable

from glidein_ext.dht.node import DhtNode
from glidein_ext.distributed import codec as messages
from glidein_ext.distributed.inbox import WorkerInbox
from glidein_ext.errors import DhtError
from glidein_ext.sched.rounds import RoundBook
from glidein_ext.tq.client.protocol import TaskAssignment, TaskOffer

log = logging.getLogger("glidein_ext.distributed.master")  # the master's log
PROBE_TIMEOUT = 3.0  # seconds a suspect has to answer its probe (a loaded process answers late)


class Deliveries:
    """The master's hand-outs and probes in flight, and their ends."""

    def __init__(
        self,
        node: DhtNode,
        book: RoundBook,
        epoch: int,
        inbox: WorkerInbox,
        *,
        poke: Callable[[], None],
        handed: Callable[[float], None],
    ) -> None:
        """``inbox``: the workers' keys (and their ``end``); ``poke``: wake the rounds;
        ``handed(seconds)``: a round's hand-outs took this long."""
        self.node = node
        self.book = book
        self.epoch = epoch
        self.inbox = inbox
        self._poke = poke
        self._handed = handed
        self.handing: set[asyncio.Future[None]] = set()  # hand-outs in flight (owned here)
        self.probing: dict[int, asyncio.Future[None]] = {}  # probes in flight, by pilot (owned)

    def start(self, items: list[tuple[TaskOffer, int, int]]) -> None:
        """Hand out a round's (task, pilot, attempt)s while the next round goes on."""
        handing = asyncio.ensure_future(self._hand_out(items))
        self.handing.add(handing)
        handing.add_done_callback(self.handing.discard)

    def cancel(self) -> None:
        """The role ends: the hand-outs and probes in flight with it."""
        for handing in [*self.handing, *self.probing.values()]:
            handing.cancel()

    async def _hand_out(self, items: list[tuple[TaskOffer, int, int]]) -> None:
        started = time.monotonic()
        await asyncio.gather(*(self._deliver(offer, p, a) for offer, p, a in items))
        seconds = time.monotonic() - started
        self._handed(seconds)
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
        body = messages.encode(messages.Assign(self.epoch, task))
        key = self.inbox.keys.get(pilot_id)
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

    async def probe_suspects(self) -> None:
        """Probe the suspects not being probed already, in tasks of this role: a round does not
        wait for them (a dead worker costs ``PROBE_TIMEOUT``, a slow one is given it), and a
        worker is dead only once a probe failed and it was unheard for the book's grace."""
        for worker in self.book.suspects():
            if worker.pilot_id not in self.probing:
                probe = asyncio.ensure_future(self._probe(worker.pilot_id, worker.address))
                self.probing[worker.pilot_id] = probe
                probe.add_done_callback(functools.partial(self._probed, worker.pilot_id))

    def _probed(self, pilot_id: int, _probe: asyncio.Future[None]) -> None:
        self.probing.pop(pilot_id, None)

    async def _probe(self, pilot_id: int, address: tuple[str, int]) -> None:
        answer = await self.node.ping(address, timeout=PROBE_TIMEOUT)
        now = time.monotonic()
        if answer is not None:
            self.book.alive(pilot_id, now)
        elif self.book.probe_failed(pilot_id, now):
            log.info("master: pilot %s is dead", pilot_id)
            self._poke()  # reported in the next call: the Task Queue requeues its task
            key = self.inbox.keys.pop(pilot_id, None)
            if key is not None:  # a slow one that still hears leaves, rather than idle unseen
                await self.inbox.end(address, pilot_id, key)
