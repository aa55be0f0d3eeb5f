"""The answering side of a DHT node: one authenticated, fresh request in, its response body out.

Synchronous and free of I/O (the RPC endpoint calls it for every request; the node owns it): it
keeps the routing table up to date with the senders (Kademlia section 2.2), drops a node that
sends LEAVE at once (Delgado Peris 2014, section III.A), appends what STORE carries (Delgado Peris
2014 §III.A), answers FIND_NODE and FIND_VALUE with the closest live contacts (Kademlia section
2.3), and hands BROADCAST and BROADCAST_REPLY to the broadcaster (Delgado Peris 2014 §III.B).

Beyond the paper, REMOVE withdraws values their owner published (a file left its cache), and
MESSAGE hands a topic-addressed payload to the node's handler of that topic and answers with its
result (the master and its workers talk this way); a topic without a handler answers None.

FIND_VALUE answers are pages (beyond the paper): a key may hold more values than one datagram, so
a request names a cursor (``after``: the last value the requester already has, values being in
byte order), and an answer carries as many values after it as fit and says whether more remain.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from glidein_ext.dht import protocol
from glidein_ext.dht.broadcaster import Broadcaster
from glidein_ext.dht.contact import Address, Contact
from glidein_ext.dht.protocol import Kind, Message, ProtocolError, WireValue
from glidein_ext.dht.routing import RoutingTable
from glidein_ext.dht.settings import DhtSettings
from glidein_ext.dht.storage import Storage

MAX_CONTACTS_ON_WIRE = 256
"""Contacts one answer may carry at most (more than any sane ``k``)."""

MessageHandler = Callable[[Any, int, Address], Any]
"""A MESSAGE topic's handler: (payload, sender id, sender address) in, the answer out (a value
that travels; None for nothing).  It runs on the node's event loop and must not block."""


class RequestHandler:
    """Answers the requests one node receives."""

    def __init__(
        self,
        own_id: int,
        table: RoutingTable,
        storage: Storage,
        settings: DhtSettings,
        broadcaster: Broadcaster,
        messages: Mapping[str, MessageHandler] | None = None,
    ) -> None:
        self._own_id = own_id
        self._table = table
        self._storage = storage
        self._settings = settings
        self._broadcaster = broadcaster
        self._messages: Mapping[str, MessageHandler] = {} if messages is None else messages

    def __call__(self, msg: Message, address: Address) -> list[Any] | None:
        """The response body, None for one-way messages; raises ProtocolError when malformed."""
        if msg.sender == self._own_id:
            raise ProtocolError("a message claiming our own id")
        if msg.kind == Kind.LEAVE:
            self._table.mark_dead(msg.sender)  # Delgado Peris 2014 §III.A: drop it at once
            return []
        if not msg.read_only:
            self._table.observe(Contact(msg.sender, *address))
        kind = msg.kind
        if kind == Kind.PING:
            return []
        if kind == Kind.FIND_NODE:
            target = protocol.parse_target(msg.body)
            return [[protocol.contact_to_wire(c) for c in self._closest(target, msg.sender)]]
        if kind == Kind.FIND_VALUE:
            target, after = protocol.parse_find_value(msg.body, self._settings.max_value_bytes)
            return protocol.found_body(
                self.values_after(target, after), self._closest(target, msg.sender)
            )
        if kind == Kind.STORE:
            return [self._store(msg.body)]
        if kind == Kind.REMOVE:
            key, values = protocol.parse_remove(
                msg.body, protocol.MAX_VALUES_PER_MESSAGE, self._settings.max_value_bytes
            )
            return [sum(self._storage.remove(key, data, msg.sender) for data in values)]
        if kind == Kind.MESSAGE:
            topic, payload = protocol.parse_message(msg.body)
            handler = self._messages.get(topic)
            return [None if handler is None else handler(payload, msg.sender, address)]
        if kind == Kind.BROADCAST:
            return [self._broadcaster.on_request(protocol.parse_broadcast(msg.body), address)]
        if kind == Kind.BROADCAST_REPLY:
            bid, value, complete, merged = protocol.parse_broadcast_reply(msg.body)
            self._broadcaster.on_reply(msg.sender, bid, value, complete, merged)
            return None
        raise ProtocolError(f"unhandled kind {kind}")

    def values_after(self, key: int, after: bytes | None) -> list[WireValue]:
        """The live values of ``key`` in byte order, those after ``after`` only when given."""
        now = time.monotonic()
        held = sorted(self._storage.get(key, now), key=lambda v: v.data)
        return [
            WireValue(v.data, v.owner, v.ttl(now)) for v in held if after is None or v.data > after
        ]

    def _closest(self, target: int, requester: int) -> list[Contact]:
        return self._table.closest(target, self._settings.k, (requester,))

    def _store(self, body: list[Any]) -> int:
        settings = self._settings
        key, values = protocol.parse_store(
            body, protocol.MAX_VALUES_PER_MESSAGE, settings.max_value_bytes
        )
        now = time.monotonic()
        return sum(
            self._storage.append(key, v.data, v.owner, min(v.ttl, settings.value_ttl), now)
            for v in values
        )
