"""The calling side of a DHT node: requests to known contacts, and what their silence means.

A request that times out makes its contact suspect (see :mod:`routing`).  Kademlia drops a contact
after several failed requests in a row (section 4.1), which, at one lookup now and then, can take
long enough that every lookup keeps paying timeouts for pilots killed without LEAVE; so (beyond
the paper) the first timeout also starts a probe that PINGs the contact until it answers, and is
kept, or has missed ``stale_after`` requests in a row, and is dropped.  Lookups avoid the contact
meanwhile.  Pilots often end together (a batch reaching its walltime), so a missed answer also
starts a *sweep*, at most once per ``sweep_interval``: a PING to every contact not heard from since
the last sweep, so that the other dead contacts are found in one go rather than one lookup at a
time; it sends at most ``sweep_rate`` PINGs a second (many survivors sweep at the same time).
Probes and sweeps are tasks of the node (``spawn``); at most :data:`MAX_PROBES` probes run at a
time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from glidein_ext.dht import ids, protocol
from glidein_ext.dht.contact import Contact
from glidein_ext.dht.handler import MAX_CONTACTS_ON_WIRE
from glidein_ext.dht.protocol import Kind, Message, ProtocolError, WireValue
from glidein_ext.dht.routing import RoutingTable
from glidein_ext.dht.rpc import RpcEndpoint, RpcTimeout
from glidein_ext.dht.settings import DhtSettings
from glidein_ext.errors import DhtError

log = logging.getLogger(__name__)

MAX_PROBES = 64
"""Suspect contacts probed at the same time at most; beyond it, lookups alone confirm deaths."""
MAX_PAGES = 64
"""FIND_VALUE pages asked of one holder in one lookup at most (64 full pages: about 4 MB)."""

Spawn = Callable[[Coroutine[Any, Any, None]], None]


class Caller:
    """Requests to contacts, with their failures recorded in the routing table."""

    def __init__(
        self, rpc: RpcEndpoint, table: RoutingTable, settings: DhtSettings, spawn: Spawn
    ) -> None:
        self._rpc = rpc
        self._table = table
        self._settings = settings
        self._spawn = spawn
        self._probing: set[int] = set()
        self._swept_at: float | None = None
        self._swept_mark: int | None = None

    async def call(self, contact: Contact, kind: Kind, body: list[Any]) -> Message | None:
        """A request to a known contact; None when it did not answer (it is then suspect)."""
        for promoted in self._table.take_promoted():
            self._spawn(self._ping(promoted))
        try:
            msg = await self._rpc.request(contact.address, kind, body, self._settings.rpc_timeout)
        except RpcTimeout:
            self._missed(contact)
            return None
        except DhtError as exc:  # our own message does not encode: a bug or an oversized payload
            log.error("cannot send %s to %s: %s", kind.name, contact, exc)
            return None
        if msg.sender != contact.id or msg.kind != kind:
            # Another node now answers at that address: the contact we knew is gone.
            self._table.mark_dead(contact.id)
            return None
        if not msg.read_only:
            self._table.observe(contact)
        return msg

    def _missed(self, contact: Contact) -> None:
        if self._table.record_failure(contact.id):
            return  # declared dead: nothing left to probe
        if contact.id not in self._probing and len(self._probing) < MAX_PROBES:
            self._probing.add(contact.id)
            self._spawn(self._probe(contact))
        now = time.monotonic()
        if self._swept_at is None or now - self._swept_at >= self._settings.sweep_interval:
            self._swept_at = now
            self._spawn(self._sweep_task())

    async def _sweep_task(self) -> None:
        silent = await self.sweep()
        log.debug("sweep: %d contact(s) did not answer", silent)

    async def sweep(self) -> int:
        """PING every contact not heard from since the last sweep; how many did not answer.

        Those that do not answer become suspect and are probed like any other.
        """
        mark = self._swept_mark
        unheard = self._table.contacts() if mark is None else self._table.unheard_since(mark)
        self._swept_mark = self._table.mark()
        silent = 0
        loop = asyncio.get_running_loop()
        per_batch = max(1, round(self._settings.sweep_rate))
        pause = per_batch / self._settings.sweep_rate
        for start in range(0, len(unheard), per_batch):
            began = loop.time()
            batch = unheard[start : start + per_batch]
            answers = await asyncio.gather(*(self.call(c, Kind.PING, []) for c in batch))
            silent += sum(answer is None for answer in answers)
            if start + per_batch < len(unheard):
                await asyncio.sleep(max(0.0, began + pause - loop.time()))
        return silent

    async def _ping(self, contact: Contact) -> None:
        await self.call(contact, Kind.PING, [])  # an answer clears it, silence probes it

    async def _probe(self, contact: Contact) -> None:
        """PING a suspect until it answers (it stays) or is declared dead (it goes)."""
        try:
            while self._table.failures(contact.id) > 0:
                try:
                    msg = await self._rpc.request(
                        contact.address, Kind.PING, [], self._settings.rpc_timeout
                    )
                except RpcTimeout:
                    self._table.record_failure(contact.id)
                    continue
                if msg.sender != contact.id:
                    self._table.mark_dead(contact.id)
                elif not msg.read_only:
                    self._table.observe(contact)
                return
        finally:
            self._probing.discard(contact.id)

    async def more_values(self, holder: Contact, key: int, after: bytes) -> list[WireValue]:
        """``holder``'s values of ``key`` after the cursor ``after``, page by page (see
        :mod:`handler`)."""
        got: list[WireValue] = []
        for _ in range(MAX_PAGES):
            msg = await self.call(holder, Kind.FIND_VALUE, [ids.to_bytes(key), after])
            try:
                page, _, more = self.parse_answer(msg, find_value=True)
            except ProtocolError as exc:
                log.debug("values of %s from %s: %s", ids.to_hex(key), holder, exc)
                break
            if any(v.data <= after for v in page):
                log.debug("%s pages the values of %s out of order", holder, ids.to_hex(key))
                break
            got.extend(page)
            if not (more and page):
                break
            after = page[-1].data
        return got

    def parse_answer(
        self, msg: Message | None, find_value: bool
    ) -> tuple[list[WireValue], list[Contact], bool]:
        """A FIND_NODE or FIND_VALUE answer: values, contacts, whether the holder has more."""
        if msg is None:
            raise ProtocolError("no answer")
        if find_value:
            return protocol.parse_found(
                msg.body,
                MAX_CONTACTS_ON_WIRE,
                protocol.MAX_VALUES_PER_MESSAGE,
                self._settings.max_value_bytes,
            )
        (contacts,) = msg.body if len(msg.body) == 1 else (None,)
        return [], protocol.parse_contacts(contacts, MAX_CONTACTS_ON_WIRE), False
