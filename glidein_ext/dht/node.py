"""A DHT node: Kademlia over UDP with the paper's changes (Delgado Peris 2014, section III.A and
III.B).

The asyncio edge that ties the pure parts together: it answers the six RPCs (PING, STORE,
FIND_NODE, FIND_VALUE, LEAVE, BROADCAST), runs iterative lookups (Kademlia section 2.3), joins
with an id and site contacts given by the caller, stores with append (Delgado Peris 2014 §III.A),
republishes (Kademlia section 2.5), leaves with LEAVE after handing its keys on (Delgado Peris 2014
§III.A), and broadcasts
with aggregation (Delgado Peris 2014 §III.B).  Requests it receives are answered by :mod:`handler`.

Beyond the paper: what a key holds may exceed one datagram, so STOREs are split to the datagram
budget and a value lookup pages through each holder's values; a contact that misses an answer is
probed at once and dropped when it keeps silent (see :mod:`routing`); the maintenance loop logs a
failing pass and carries on.  Every task the node starts is kept in a set, reaped with logging and
cancelled by :meth:`DhtNode.close`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from glidein_ext.dht import ids, protocol
from glidein_ext.dht.aggregation import Combine
from glidein_ext.dht.broadcaster import Answer, Broadcaster, BroadcastResult
from glidein_ext.dht.caller import Caller
from glidein_ext.dht.contact import Address, Contact
from glidein_ext.dht.handler import MessageHandler, RequestHandler
from glidein_ext.dht.lookup import Lookup, merge_values, pairs
from glidein_ext.dht.protocol import Codec, Kind, Message, ProtocolError, WireValue
from glidein_ext.dht.routing import RoutingTable
from glidein_ext.dht.rpc import NodeStats, RpcEndpoint, RpcTimeout
from glidein_ext.dht.settings import DhtSettings
from glidein_ext.dht.sockets import resolve, tune_socket
from glidein_ext.dht.storage import Storage
from glidein_ext.errors import DhtError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LookupResult:
    """The outcome of one iterative lookup, with what the benchmark measures."""

    contacts: list[Contact]
    values: list[WireValue]
    hops: int
    queried: int


class DhtNode:
    """One member of a site's DHT."""

    def __init__(
        self,
        key: bytes,
        *,
        node_id: int | None = None,
        settings: DhtSettings | None = None,
        read_only: bool = False,
        rng: random.Random | None = None,
    ) -> None:
        self.id = node_id if node_id is not None else ids.random_id()
        if not 0 <= self.id < ids.ID_SPACE:
            raise DhtError("a node id must be a 160-bit number")
        self.settings = settings or DhtSettings()
        self.read_only = read_only
        self.stats = NodeStats()
        self.table = RoutingTable(self.id, self.settings.k, self.settings.stale_after)
        self.storage = Storage(self.settings.max_values_per_key)
        self._rng = rng or random.Random()
        self._codec = Codec(key, self.settings.auth_tag_bytes)
        self._broadcaster = Broadcaster(
            self.id,
            self.table,
            self.settings,
            self.stats,
            request=self._call,
            notify=self._notify,
            spawn=self._spawn,
            discover=self._neighbours,
        )
        self._messages: dict[str, MessageHandler] = {}
        self._rpc = RpcEndpoint(
            self._codec,
            self.id,
            RequestHandler(
                self.id, self.table, self.storage, self.settings, self._broadcaster, self._messages
            ),
            replay_window=self.settings.replay_window,
            stats=self.stats,
            read_only=read_only,
        )
        self._caller = Caller(self._rpc, self.table, self.settings, self._spawn)
        self._tasks: set[asyncio.Task[None]] = set()
        # What we published ourselves: key -> value -> lifetime.  Republished with a fresh
        # lifetime by the owner (Kademlia section 2.5) until withdrawn.
        self._published: dict[int, dict[bytes, float]] = {}
        self._address: Address | None = None
        self._closed = False

    # --- life cycle ----------------------------------------------------------------------------

    async def start(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        maintenance: bool = True,
        sock: socket.socket | None = None,
    ) -> Address:
        """Bind the UDP socket (or use ``sock``, a UDP socket bound already: a pilot registers
        its address before it learns its id and key); with ``maintenance``, republish and
        refresh periodically."""
        loop = asyncio.get_running_loop()
        try:
            if sock is not None:
                transport, _ = await loop.create_datagram_endpoint(lambda: self._rpc, sock=sock)
            else:
                transport, _ = await loop.create_datagram_endpoint(
                    lambda: self._rpc, local_addr=(host, port)
                )
        except OSError as exc:
            raise DhtError(f"cannot bind UDP {host}:{port}: {exc.strerror or exc}") from exc
        tune_socket(transport)
        self._address = self._rpc.address
        if maintenance and not self.read_only:
            self._spawn(self._maintain())
        return self._address

    async def __aenter__(self) -> DhtNode:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def address(self) -> Address:
        if self._address is None:
            raise DhtError("the node is not started")
        return self._address

    @property
    def contact(self) -> Contact:
        return Contact(self.id, *self.address)

    async def close(self) -> None:
        """Stop at once, without LEAVE (what a killed pilot looks like to the others)."""
        if self._closed:
            return
        self._closed = True
        self._broadcaster.close()
        self._rpc.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        if self._closed:
            coro.close()
            return
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._reap)

    def _reap(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("DHT task failed", exc_info=task.exception())

    async def _maintain(self) -> None:
        """Every republish interval (with jitter), one maintenance pass, until cancelled.

        The loop must outlive a failing pass (the one contract that allows a blind except here):
        a failure is logged with its traceback and the next pass runs on schedule.
        """
        period = self.settings.republish_interval
        while True:
            await asyncio.sleep(period * (0.75 + 0.5 * self._rng.random()))
            try:
                await self.maintenance_pass()
            except Exception:  # contract: a failing pass never ends maintenance (logged)
                log.exception("DHT maintenance pass failed; the next one is due in ~%g s", period)

    async def maintenance_pass(self) -> None:
        """Expire values, republish (Kademlia section 2.5), refresh idle buckets (section 2.3),
        and ping the contacts not heard from since the last sweep (beyond the paper)."""
        self.storage.expire(time.monotonic())
        await self.republish()
        await self.refresh()
        await self._caller.sweep()

    # --- joining and leaving -------------------------------------------------------------------

    async def join(self, addresses: Iterable[Address]) -> int:
        """Join through site contacts (Delgado Peris 2014 §III.A): ping them, look ourselves up,
        fill buckets.

        Returns how many contacts answered; raises DhtError when none did.
        """
        loop = asyncio.get_running_loop()
        resolved = [await resolve(loop, address) for address in addresses]
        answered = [c for c in await asyncio.gather(*map(self.ping, resolved)) if c is not None]
        if not answered:
            where = ", ".join(f"{h}:{p}" for h, p in resolved) or "no address given"
            raise DhtError(f"no DHT contact answered ({where})")
        if not self.read_only:
            # Kademlia section 2.3: a lookup for our own id, then refresh the farther buckets.
            found = await self.lookup(self.id)
            await self._refresh_at_join(found.contacts)
        return len(answered)

    async def _refresh_at_join(self, closest: Sequence[Contact]) -> None:
        """Refresh the buckets further away than our closest neighbour (Kademlia section 2.3),
        as far as a joining node needs them.

        The lookup for our own id found the ``k`` nodes closest to us, so every bucket below the
        one the farthest of them falls in holds every node of its range already: those are not
        looked up again.  The farther buckets are, each with a lookup for a random id in its range
        that ends once the bucket holds ``join_fill`` contacts (a full lookup at each costs about
        ``k`` requests more and gains contacts that later traffic brings anyway).  A non-empty
        bucket for every non-empty range is what lookups and the broadcast rely on; the
        maintenance pass's refresh fills the buckets further.
        """
        settings = self.settings
        if len(closest) < settings.k:
            return  # the lookup met every node there is
        start = ids.bucket_index(self.id, closest[-1].id)
        fill = min(settings.join_fill, settings.k)
        indexes = [i for i in range(start, ids.ID_BITS) if self.table.bucket_size(i) < fill]

        def filled(index: int) -> Callable[[], bool]:
            return lambda: self.table.bucket_size(index) >= fill

        await asyncio.gather(
            *(
                self.lookup(self.table.random_id_in_bucket(i, self._rng), until=filled(i))
                for i in indexes
            )
        )

    async def ping(self, address: Address, timeout: float | None = None) -> Contact | None:
        """PING an address whose id we may not know; the contact that answered (within
        ``timeout``, ``rpc_timeout`` by default), if any."""
        wait = self.settings.rpc_timeout if timeout is None else timeout
        try:
            msg = await self._rpc.request(address, Kind.PING, [], wait)
        except RpcTimeout:
            return None
        contact = Contact(msg.sender, *address)
        if not msg.read_only and msg.sender != self.id:
            self.table.observe(contact)
        return contact

    async def refresh(self, force: bool = False) -> None:
        """Look up a random id in each bucket not looked up for a while (Kademlia section 2.3)."""
        interval = 0.0 if force else self.settings.republish_interval
        indexes = self.table.buckets_to_refresh(time.monotonic(), interval)
        targets = [self.table.random_id_in_bucket(i, self._rng) for i in indexes]
        await asyncio.gather(*(self.lookup(t) for t in targets))

    async def leave(self) -> None:
        """Leave gracefully (Delgado Peris 2014 §III.A): hand our keys on, send LEAVE to our
        contacts, close."""
        if self._closed:
            return
        now = time.monotonic()
        keys = self.storage.keys()
        for start in range(0, len(keys), 16):
            await asyncio.gather(
                *(self._store_elsewhere(key, now) for key in keys[start : start + 16])
            )
        timeout = self.settings.rpc_timeout
        await asyncio.gather(
            *(self._rpc.request(c.address, Kind.LEAVE, [], timeout) for c in self.table.contacts()),
            return_exceptions=True,
        )
        await self.close()

    # --- values --------------------------------------------------------------------------------

    async def put(self, key: str | bytes, value: bytes, ttl: float | None = None) -> int:
        """Append ``value`` to ``key`` on the ``replication`` closest nodes; how many stored it."""
        return await self.put_many(key, [value], ttl)

    async def put_many(
        self, key: str | bytes, values: Sequence[bytes], ttl: float | None = None
    ) -> int:
        """Append ``values`` to ``key`` (STOREs split to the datagram budget); how many nodes
        stored them all."""
        limit = self.settings.max_value_bytes
        if any(len(value) > limit for value in values):
            raise DhtError(f"a value has at most {limit} bytes")
        target = ids.key_id(key)
        lifetime = self.settings.value_ttl if ttl is None else ttl
        if not self.read_only:
            published = self._published.setdefault(target, {})
            published.update(dict.fromkeys(values, lifetime))
        found = await self.lookup(target)
        wired = [WireValue(value, self.id, lifetime) for value in dict.fromkeys(values)]
        return await self._store_at(target, wired, found.contacts)

    def withdraw(self, key: str | bytes, value: bytes) -> bool:
        """Stop republishing ``value`` (say, a file left our cache); it then expires."""
        target = ids.key_id(key)
        values = self._published.get(target, {})
        found = values.pop(value, None) is not None
        if not values:
            self._published.pop(target, None)
        return found

    async def remove(self, key: str | bytes, value: bytes) -> int:
        """Withdraw ``value`` now (beyond the paper): stop republishing it and ask the nodes
        closest to ``key`` (the ``k`` closest, not only the ``replication`` first: values move
        as nodes come and go) to drop it.  Only values this node published are dropped (the
        holders check the owner).  Returns how many nodes dropped it."""
        self.withdraw(key, value)
        target = ids.key_id(key)
        removed = int(self.storage.remove(target, value, self.id))
        found = await self.lookup(target)
        bodies = protocol.remove_bodies(target, [value])
        answers = await asyncio.gather(
            *(self._call(c, Kind.REMOVE, body) for c in found.contacts for body in bodies)
        )
        for msg in answers:
            if msg is not None:
                try:
                    removed += 1 if protocol.parse_count(msg.body) else 0
                except ProtocolError:
                    log.debug("malformed REMOVE answer")
        return removed

    async def get(self, key: str | bytes) -> list[bytes]:
        """Every value stored under ``key`` (all the replicas' locations)."""
        return [v.data for v in (await self.lookup(ids.key_id(key), find_value=True)).values]

    async def republish(self, force: bool = False) -> int:
        """Store values again at the closest nodes (Kademlia section 2.5); keys republished.

        The values we published get a fresh lifetime, wherever they are held.  The values we hold
        for others keep theirs; without ``force`` only keys nobody stored to us within the
        republish interval are sent.
        """
        now = time.monotonic()
        self.storage.expire(now)
        for key, published in list(self._published.items()):
            fresh = [WireValue(data, self.id, ttl) for data, ttl in published.items()]
            found = await self.lookup(key)
            await self._store_at(key, fresh, found.contacts)
        keys = (
            self.storage.keys()
            if force
            else self.storage.due_for_republish(now, self.settings.republish_interval)
        )
        for key in keys:
            await self._store_elsewhere(key, now)
            self.storage.mark_republished(key, now)
        return len(keys) + len(self._published)

    async def _store_elsewhere(self, key: int, now: float) -> None:
        values = [WireValue(v.data, v.owner, v.ttl(now)) for v in self.storage.get(key, now)]
        if values:
            found = await self.lookup(key)
            await self._store_at(key, values, found.contacts, include_self=False)

    async def _store_at(
        self,
        key: int,
        values: list[WireValue],
        found: Sequence[Contact],
        include_self: bool = True,
    ) -> int:
        candidates = list(found)
        if include_self and not self.read_only:
            candidates.append(self.contact)
        candidates.sort(key=lambda c: c.id ^ key)
        holders = candidates[: self.settings.replication]
        now = time.monotonic()
        bodies = protocol.store_bodies(key, values)
        stored = 0
        remote = []
        for holder in holders:
            if holder.id == self.id:
                for v in values:
                    self.storage.append(key, v.data, v.owner, v.ttl, now)
                stored += 1
            else:
                remote.append(self._store_all(holder, bodies))
        stored += sum(await asyncio.gather(*remote))
        return stored

    async def _store_all(self, holder: Contact, bodies: list[list[Any]]) -> bool:
        """Send STOREs one after the other (one full datagram in flight per holder)."""
        for body in bodies:
            if await self._call(holder, Kind.STORE, body) is None:
                return False
        return True

    # --- lookups -------------------------------------------------------------------------------

    async def lookup(
        self,
        target: int,
        *,
        find_value: bool = False,
        exclude: Iterable[int] = (),
        until: Callable[[], bool] | None = None,
    ) -> LookupResult:
        """The iterative lookup of Kademlia section 2.3, driven round by round; ``until``, when
        given, ends it early after the first round that makes it true."""
        settings = self.settings
        skip = set(exclude)
        state = Lookup(
            target,
            self.table.closest(target, settings.k, skip),
            own_id=self.id,
            width=settings.k,
            alpha=settings.alpha,
            exclude=skip,
            avoid=self.table.is_suspect if self.table.has_suspects() else None,
        )
        values: dict[bytes, WireValue] = {}
        if find_value:
            now = time.monotonic()
            for held in self.storage.get(target, now):
                values[held.data] = WireValue(held.data, held.owner, held.ttl(now))
        kind = Kind.FIND_VALUE if find_value else Kind.FIND_NODE
        body: list[Any] = [ids.to_bytes(target), None] if find_value else [ids.to_bytes(target)]
        while not (values and state.settled(settings.replication)):
            batch = state.next_batch()
            if not batch:
                break
            replies = await asyncio.gather(*(self._call(c, kind, body) for c in batch))
            rest = []
            for contact, msg in pairs(batch, replies):
                try:
                    found, contacts, more = self._caller.parse_answer(msg, find_value)
                except ProtocolError:
                    state.failed(contact)
                    continue
                state.answered(contact, contacts)
                merge_values(values, found)
                if more and found:
                    rest.append(self._caller.more_values(contact, target, found[-1].data))
            for found in await asyncio.gather(*rest):
                merge_values(values, found)
            if until is not None and until():
                break
        self.table.note_lookup(target, time.monotonic())
        return LookupResult(
            state.closest(settings.k), list(values.values()), state.rounds, state.queried
        )

    async def _neighbours(self, target: int, exclude: set[int]) -> list[Contact]:
        """One FIND_NODE round to our ``alpha`` contacts closest to ``target``: what they know."""
        asked = self.table.closest(target, self.settings.alpha, exclude)
        body = [ids.to_bytes(target)]
        replies = await asyncio.gather(*(self._call(c, Kind.FIND_NODE, body) for c in asked))
        found: dict[int, Contact] = {}
        for msg in replies:
            try:
                _, contacts, _ = self._caller.parse_answer(msg, find_value=False)
            except ProtocolError:
                continue
            for contact in contacts:
                if contact.id not in exclude and contact.id != self.id:
                    found[contact.id] = contact
        return list(found.values())

    # --- broadcast -----------------------------------------------------------------------------

    def register_broadcast(self, topic: str, answer: Answer, combine: Combine) -> None:
        """Answer broadcasts of ``topic`` with ``answer(payload)``; fold subtrees with ``combine``.

        ``combine`` receives a list of answers or of already-combined answers, so it must be
        associative (``sum``, a merge of dicts, ...).
        """
        self._broadcaster.register(topic, answer, combine)

    async def broadcast(
        self, topic: str, payload: Any, timeout: float | None = None
    ) -> BroadcastResult:
        """Send ``payload`` to every node of the site and return the aggregated answers."""
        return await self._broadcaster.start(
            topic, payload, self.settings.broadcast_timeout if timeout is None else timeout
        )

    # --- messages to one node (beyond the paper) -------------------------------------------------

    def register_message(self, topic: str, handler: MessageHandler) -> None:
        """Answer MESSAGEs of ``topic`` with ``handler(payload, sender id, sender address)``;
        it runs on the event loop and must return at once (a value that travels, or None)."""
        self._messages[topic] = handler

    async def message(
        self, address: Address, topic: str, payload: Any, timeout: float | None = None
    ) -> Any:
        """Send ``payload`` to the node at ``address`` under ``topic``; its handler's answer.

        Raises DhtError when no answer came within ``timeout`` (``rpc_timeout`` by default) or
        the payload does not fit in one datagram.
        """
        wait = self.settings.rpc_timeout if timeout is None else timeout
        try:
            msg = await self._rpc.request(address, Kind.MESSAGE, [topic, payload], wait)
        except RpcTimeout as exc:
            raise DhtError(f"no answer from {address[0]}:{address[1]} to {topic!r}") from exc
        if not msg.read_only and msg.sender != self.id:
            self.table.observe(Contact(msg.sender, *address))
        try:
            return protocol.parse_answer(msg.body)
        except ProtocolError as exc:
            raise DhtError(f"malformed answer to {topic!r} from {address}: {exc}") from exc

    # --- the RPC edge --------------------------------------------------------------------------

    async def _call(self, contact: Contact, kind: Kind, body: list[Any]) -> Message | None:
        return await self._caller.call(contact, kind, body)

    def _notify(self, address: Address, kind: Kind, body: list[Any]) -> None:
        self._rpc.notify(address, kind, body)
