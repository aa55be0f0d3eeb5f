"""The master's side of the workers' sealed messages (Delgado Peris 2014 §III.B-C): hello (a
worker joins, or meets a new master), done (a completion) and bye (a worker leaves).

Each message is sealed with the worker's key for this master's epoch (``distributed.codec``,
``tq.client.pilotkeys``): one that is not, or that replays a nonce or falls outside the time
window, is ignored, so no pilot speaks for another.  The keys come with the claim's answer and,
for pilots met later, with ``sync`` (a message from a pilot whose key has not come yet is held
and checked when it comes: ``asked`` names those pilots for the next ``sync``, ``learn`` takes the
answer); ``sync`` also names the roster's pilots the Task Queue no longer has (revoked, gone),
which the master drops and tells to leave (``end``).

Python 3.9, standard library only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from glidein_ext.dht.node import DhtNode
from glidein_ext.distributed import codec as messages
from glidein_ext.distributed.door import Admitted, Decision, Door, Pending, Refused, Role
from glidein_ext.errors import DhtError
from glidein_ext.sched.rounds import RoundBook
from glidein_ext.tq.client.protocol import Completion, SitePilot

log = logging.getLogger("glidein_ext.distributed.master")  # the master's log
HELD_PER_PILOT = 4  # messages kept from a pilot whose key has not come yet (the latest)
HELD_PILOTS = 4096  # pilots whose messages wait for their key, at most
_REFUSED: Any = object()


class WorkerInbox:
    """The workers' hello/done/bye messages to this master, and their keys."""

    def __init__(
        self,
        node: DhtNode,
        book: RoundBook,
        epoch: int,
        *,
        poke: Callable[[], None],
        active: Callable[[], bool],
        quiet: Callable[[int, int], bool] = lambda task_id, pilot_id: False,
    ) -> None:
        """``book``: the master's rounds (a message joins, completes, leaves there); ``poke``:
        wake the rounds; ``active``: whether the role still holds (no answer after it ends);
        ``quiet``: whether a task's success (by a pilot) releases no waiting task and leaves
        it nothing held (``sched.stock``)."""
        self.node = node
        self.book = book
        self.epoch = epoch
        self._poke = poke
        self._active = active
        self._quiet = quiet
        self.door = Door(Role.MASTER, 0, epoch=epoch)  # every message's checks, and the keys
        self.keys = self.door.keys  # each worker's key with this epoch
        self.held: dict[int, list[Pending]] = {}  # messages awaiting their sender's key
        self._roster_checked = time.monotonic()

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
                    self.door.learn_key(pilot.pilot_id, bytes.fromhex(pilot.key))
                except ValueError:
                    log.warning("master: the Task Queue sent pilot %s a bad key", pilot.pilot_id)
            self.book.join(pilot.pilot_id, address, now, task)
        self.node.register_message(messages.HELLO, self._on_hello)
        self.node.register_message(messages.DONE, self._on_done)
        self.node.register_message(messages.BYE, self._on_bye)

    def _on_hello(self, payload: Any, _sender: int, _address: Any) -> Any:
        return self._receive(messages.HELLO, payload)

    def _on_done(self, payload: Any, _sender: int, _address: Any) -> Any:
        return self._receive(messages.DONE, payload)

    def _on_bye(self, payload: Any, _sender: int, _address: Any) -> Any:
        return self._receive(messages.BYE, payload)

    def _receive(self, kind: str, payload: Any) -> Any:
        """A worker's sealed message through the door (``distributed.door``): its sealed answer,
        ``"pending"`` (its key has not come: checked then), or None (refused, or not the master
        of the epoch it was sealed for)."""
        if not self._active():
            return None
        decision = self.door.admit(kind, payload, time.time())
        if isinstance(decision, Pending):
            self._hold(decision)
            return messages.PENDING
        value = self._act(decision)
        return (
            None
            if value is _REFUSED or not isinstance(decision, Admitted)
            else decision.answer(value)
        )

    def _hold(self, pending: Pending) -> None:
        pilot_id = pending.envelope.pilot_id
        held = self.held.get(pilot_id)
        if held is None:
            if len(self.held) >= HELD_PILOTS:
                return
            held = self.held[pilot_id] = []
        held.append(pending)
        del held[:-HELD_PER_PILOT]
        self.book.trigger(time.monotonic())  # a Task Queue call brings the key
        self._poke()

    def _act(self, decision: Decision) -> Any:
        """Act on a message the door let in; its answer, or _REFUSED (logged)."""
        if isinstance(decision, Refused):
            if not decision.quiet:
                log.warning("master: a %s refused: %s", decision.kind, decision.reason)
            return _REFUSED
        if not isinstance(decision, Admitted):
            return _REFUSED
        pilot_id, message = decision.pilot_id, decision.message
        if isinstance(message, messages.Hello):
            task = (message.task_id, message.attempt) if message.task_id else None
            self.book.join(pilot_id, message.address, time.monotonic(), task)
            self._poke()
            return [self.epoch]
        if isinstance(message, messages.Done):
            completion = message.completion
            self.local_done(pilot_id, completion)
            if self.book.synced((completion.task_id, completion.attempt)):
                return messages.DONE_SYNCED  # the worker stops resending it
            return True
        if isinstance(message, messages.Bye):
            self.book.leave(pilot_id)
            return True
        return _REFUSED

    def local_done(self, pilot_id: int, completion: Completion) -> None:
        """A completion, from a worker or from this pilot's own last task."""
        key = (completion.task_id, completion.attempt)
        quiet = completion.exit_code == 0 and self._quiet(completion.task_id, pilot_id)
        new = self.book.completed(pilot_id, key, completion, time.monotonic(), quiet)
        if new and not self.book.deferred(key):  # a quiet one waits for the next call
            self._poke()

    def asked(self, now: float) -> tuple[int, ...]:
        """The pilots the next ``sync`` asks about: those whose key has not come, and now and
        then (each ``heartbeat``) the whole roster (the Task Queue names those it no longer
        has)."""
        asked = set(self.held)
        if now - self._roster_checked >= self.book.heartbeat:
            self._roster_checked = now
            asked.update(self.book.workers)
        return tuple(sorted(asked))

    async def learn(self, keys: Sequence[Any], gone: Sequence[int]) -> None:
        """The Task Queue's answer about the pilots asked: keys (their held messages are checked
        now), and pilots it no longer has (dropped, and told to leave)."""
        for item in keys:
            try:
                key = bytes.fromhex(item.key)
            except ValueError:
                continue
            self.door.learn_key(item.pilot_id, key)
            now = time.time()
            for pending in self.held.pop(item.pilot_id, []):
                self._act(self.door.held(pending, now))
        ending = []
        for pilot_id in gone:
            self.held.pop(pilot_id, None)
            worker = self.book.workers.get(pilot_id)
            self.book.leave(pilot_id)
            known = self.door.forget_key(pilot_id)
            if worker is not None and known is not None:
                log.info("master: pilot %s is no live pilot of the site any more", pilot_id)
                ending.append(self.end(worker.address, pilot_id, known))
        if ending:
            await asyncio.gather(*ending)

    async def resign(self, successors: Sequence[tuple[int, tuple[str, int]]]) -> None:
        """The leaving master tells its successors (the lowest ids, Delgado Peris 2014 §III.B)
        that the role is free: the first claims at once, not after the master timeout's
        silence.  Sealed with each one's key; a successor that does not answer waits as
        before."""
        body = messages.encode(messages.Resign(tuple(successors)))  # their order: who claims first
        sends = [
            self._resign(address, pilot_id, self.keys[pilot_id], body)
            for pilot_id, address in successors
            if pilot_id in self.keys
        ]
        if sends:
            await asyncio.gather(*sends)

    async def _resign(
        self, address: tuple[str, int], pilot_id: int, key: bytes, body: list[Any]
    ) -> None:
        payload = messages.seal(key, messages.RESIGN, pilot_id, self.epoch, body, time.time())
        try:
            await self.node.message(address, messages.RESIGN, payload, timeout=1.0)
        except DhtError:
            log.info("master: pilot %s did not answer the resignation", pilot_id)

    async def end(self, address: tuple[str, int], pilot_id: int, key: bytes) -> None:
        body = ["the Task Queue no longer has this pilot"]
        payload = messages.seal(key, messages.END, pilot_id, self.epoch, body, time.time())
        try:
            await self.node.message(address, messages.END, payload, timeout=1.0)
        except DhtError:
            log.info("master: pilot %s did not answer its end", pilot_id)
