"""The wire format: a fixed header and a compact body, authenticated with a per-site HMAC.

A datagram is (beyond the paper; standard library only)::

    version(1) kind(1) flags(1) sender(20) timestamp_ms(8) nonce(8) [reply_to(8)]  body  tag

packed with :mod:`struct` (big-endian), ``reply_to`` present exactly on responses, ``body`` a list
in the encoding of :mod:`glidein_ext.dht.wire`, and ``tag`` HMAC-SHA256 over everything before it
with the site key, truncated to ``tag_bytes`` (the key is handed out at join).  ``nonce`` is 8
random bytes, the request identifier as well; a response carries its request's nonce in
``reply_to`` and the request kind with the RESPONSE bit.  Bodies are lists, checked by the
``parse_*`` helpers below; anything malformed raises :class:`ProtocolError` and is dropped by the
caller.  A datagram is at most :data:`MAX_DATAGRAM` bytes; :data:`BODY_BUDGET` is what a body may
use whatever the header and tag, and senders split what they send to it.
"""

from __future__ import annotations

import functools
import hmac
import math
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from glidein_ext.dht import ids, wire
from glidein_ext.dht.contact import Contact
from glidein_ext.dht.regions import Block
from glidein_ext.errors import DhtError

VERSION = 2
NONCE_BYTES = 8
MAX_DATAGRAM = 65000
MAX_TAG_BYTES = 32
HEADER = struct.Struct(">BBB20sQ8s")
"""version, kind, flags, sender id, timestamp in ms, nonce; a response adds its ``reply_to``."""
MAX_HEADER_BYTES = HEADER.size + NONCE_BYTES
BODY_BUDGET = MAX_DATAGRAM - MAX_HEADER_BYTES - MAX_TAG_BYTES
"""Bytes an encoded body may take so that the datagram fits, whatever its header and tag."""
MAX_VALUES_PER_MESSAGE = 2048
"""Values one STORE or FIND_VALUE answer carries at most (senders split beyond it)."""
FLAG_READ_ONLY = 1
"""A client that never stores nor routes: receivers keep it out of their routing tables."""


class Kind(IntEnum):
    """Message kinds: the six RPCs (Kademlia's four, LEAVE and BROADCAST), the broadcast's upward
    reply, the withdrawal of a value and a message to one node."""

    PING = 1
    STORE = 2
    FIND_NODE = 3
    FIND_VALUE = 4
    LEAVE = 5
    BROADCAST = 6
    BROADCAST_REPLY = 7  # one-way, child to parent (Delgado Peris 2014 §III.B)
    REMOVE = 8  # withdraw values the sender owns (a file left its cache)
    MESSAGE = 9  # one topic-addressed request to one node (the master and its workers)


RESPONSE = 0x80


class ProtocolError(ValueError):
    """A datagram that is not a well-formed message of this protocol."""


class AuthError(ProtocolError):
    """A datagram whose HMAC tag does not verify with the site key."""


@dataclass(frozen=True)
class Message:
    kind: Kind
    response: bool
    sender: int
    timestamp: float
    nonce: bytes
    reply_to: bytes | None
    body: list[Any]
    read_only: bool = False


class Codec:
    """Encodes and authenticates messages with one site key."""

    def __init__(self, key: bytes, tag_bytes: int = 16) -> None:
        if len(key) < 16:
            raise DhtError("the site key must have at least 16 bytes")
        if not 8 <= tag_bytes <= MAX_TAG_BYTES:
            raise DhtError(f"the tag has 8 to {MAX_TAG_BYTES} bytes")
        self._key = key
        self.tag_bytes = tag_bytes

    def _tag(self, data: bytes) -> bytes:
        return hmac.digest(self._key, data, "sha256")[: self.tag_bytes]

    def encode(
        self,
        kind: Kind,
        sender: int,
        body: list[Any],
        *,
        timestamp: float,
        response: bool = False,
        reply_to: bytes | None = None,
        nonce: bytes | None = None,
        read_only: bool = False,
    ) -> tuple[bytes, bytes]:
        """The datagram and its nonce; raises DhtError if it would not fit in one datagram."""
        nonce = nonce if nonce is not None else os.urandom(NONCE_BYTES)
        if len(nonce) != NONCE_BYTES or response != (reply_to is not None):
            raise DhtError("a nonce has 8 bytes; reply_to is set on responses only")
        try:
            header = HEADER.pack(
                VERSION,
                int(kind) | (RESPONSE if response else 0),
                FLAG_READ_ONLY if read_only else 0,
                ids.to_bytes(sender),
                round(timestamp * 1000),
                nonce,
            )
        except (struct.error, OverflowError) as exc:
            raise DhtError(f"cannot encode a message header: {exc}") from exc
        if reply_to is not None:
            if len(reply_to) != NONCE_BYTES:
                raise DhtError("reply_to is a nonce of 8 bytes")
            header += reply_to
        packed = header + wire.encode(body)
        if len(packed) + self.tag_bytes > MAX_DATAGRAM:
            raise DhtError(f"message of {len(packed)} bytes does not fit in one datagram")
        return packed + self._tag(packed), nonce

    def decode(self, datagram: bytes) -> Message:
        """Verify and parse; raises AuthError or ProtocolError."""
        if len(datagram) <= self.tag_bytes:
            raise ProtocolError("datagram too short")
        packed, tag = datagram[: -self.tag_bytes], datagram[-self.tag_bytes :]
        if not hmac.compare_digest(tag, self._tag(packed)):
            raise AuthError("bad HMAC tag")
        if len(packed) < HEADER.size:
            raise ProtocolError("truncated header")
        version, kind_int, flags, sender, ts_ms, nonce = HEADER.unpack_from(packed)
        if version != VERSION:
            raise ProtocolError(f"unsupported version {version!r}")
        try:
            kind = Kind(kind_int & ~RESPONSE)
        except ValueError as exc:
            raise ProtocolError(f"unknown kind {kind_int}") from exc
        response = bool(kind_int & RESPONSE)
        start = HEADER.size
        reply_to = None
        if response:
            start += NONCE_BYTES
            if len(packed) < start:
                raise ProtocolError("truncated reply_to")
            reply_to = packed[HEADER.size : start]
        try:
            body = wire.decode(packed, start)
        except wire.DecodeError as exc:
            raise ProtocolError(f"bad body: {exc}") from exc
        if not isinstance(body, list):
            raise ProtocolError("body is not a list")
        return Message(
            kind=kind,
            response=response,
            sender=ids.from_bytes(sender),
            timestamp=ts_ms / 1000,
            nonce=nonce,
            reply_to=reply_to,
            body=body,
            read_only=bool(flags & FLAG_READ_ONLY),
        )


# --- body helpers: wire values to checked Python values ------------------------------------------


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError(f"expected an integer, got {type(value).__name__}")
    return value


def _num(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProtocolError(f"expected a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ProtocolError("expected a finite number")
    return float(value)


def _list(value: object, length: int | None = None) -> list[Any]:
    if not isinstance(value, list) or (length is not None and len(value) != length):
        raise ProtocolError(f"expected a list of {length} items")
    return value


def parse_id(value: object) -> int:
    if not isinstance(value, bytes) or len(value) != ids.ID_BYTES:
        raise ProtocolError("bad id")
    return ids.from_bytes(value)


def parse_bytes(value: object, limit: int) -> bytes:
    if not isinstance(value, bytes) or len(value) > limit:
        raise ProtocolError("bad bytes value")
    return value


_CONTACT_HEAD = ids.ID_BYTES + 2  # the id, then the port
_CONTACT_CACHE = 4096


_wired: dict[int, tuple[Contact, bytes]] = {}
"""Contact id -> (that very contact object, its wire form): routing tables hand out the same
objects again and again."""


def contact_to_wire(contact: Contact) -> bytes:
    """``id(20) || port(2, big-endian) || host (UTF-8)``: one short bytes value, cheap to decode.

    Every FIND_NODE and FIND_VALUE answer carries ``k`` contacts, mostly the same ones, so the
    encodings are kept (for the same object only: no hashing of the contact).
    """
    hit = _wired.get(contact.id)
    if hit is not None and hit[0] is contact:
        return hit[1]
    wired = (
        contact.id.to_bytes(ids.ID_BYTES, "big")
        + contact.port.to_bytes(2, "big")
        + (contact.host.encode())
    )
    if len(_wired) >= _CONTACT_CACHE:
        _wired.clear()
    _wired[contact.id] = (contact, wired)
    return wired


def parse_contact(value: object) -> Contact:
    """A contact from its wire form; raises ProtocolError."""
    if type(value) is not bytes:
        raise ProtocolError("a contact is id, port and host in one bytes value")
    return _parse_contact(value)


@functools.lru_cache(maxsize=_CONTACT_CACHE)
def _parse_contact(value: bytes) -> Contact:
    # Hot path (a lookup answer carries k contacts, mostly known ones): checks written out, cached.
    if not _CONTACT_HEAD < len(value) <= _CONTACT_HEAD + 255:
        raise ProtocolError("a contact is id, port and host in 24 to 277 bytes")
    port = value[ids.ID_BYTES] << 8 | value[ids.ID_BYTES + 1]
    if port == 0:
        raise ProtocolError("bad port")
    try:
        host = value[_CONTACT_HEAD:].decode()
    except UnicodeDecodeError as exc:
        raise ProtocolError("bad host") from exc
    return Contact(int.from_bytes(value[: ids.ID_BYTES], "big"), host, port)


def parse_contacts(value: object, limit: int) -> list[Contact]:
    items = _list(value)
    if len(items) > limit:
        raise ProtocolError("too many contacts")
    return [parse_contact(item) for item in items]


@dataclass(frozen=True)
class WireValue:
    """A value as it travels: its bytes, its owner, its remaining lifetime in seconds."""

    __slots__ = ("data", "owner", "ttl")
    data: bytes
    owner: int
    ttl: float

    def to_wire(self) -> list[Any]:
        return [self.data, ids.to_bytes(self.owner), float(self.ttl)]

    @property
    def wire_size(self) -> int:
        """Bytes of :meth:`to_wire` once encoded."""
        inner = wire.bytes_size(len(self.data)) + wire.bytes_size(ids.ID_BYTES) + wire.FLOAT_SIZE
        return wire.list_size(3, inner)


def parse_values(value: object, max_count: int, max_bytes: int) -> list[WireValue]:
    items = _list(value)
    if len(items) > max_count:
        raise ProtocolError("too many values")
    found = []
    for item in items:
        data, owner, ttl = _list(item, 3)
        found.append(WireValue(parse_bytes(data, max_bytes), parse_id(owner), _num(ttl)))
    return found


def split_values(
    values: Sequence[WireValue], budget: int, max_count: int = MAX_VALUES_PER_MESSAGE
) -> list[list[WireValue]]:
    """``values`` cut into consecutive runs whose wire encodings fit ``budget`` bytes each.

    Each run also has at most ``max_count`` values; a value larger than the budget alone raises
    DhtError (settings keep values far below it).
    """
    runs: list[list[WireValue]] = []
    run: list[WireValue] = []
    used = 0
    for value in values:
        size = value.wire_size
        if size > budget:
            raise DhtError(f"a value of {len(value.data)} bytes does not fit in one datagram")
        if run and (used + size > budget or len(run) >= max_count):
            runs.append(run)
            run, used = [], 0
        run.append(value)
        used += size
    if run:
        runs.append(run)
    return runs


STORE_VALUES_BUDGET = BODY_BUDGET - wire.list_size(
    2, wire.bytes_size(ids.ID_BYTES) + wire.list_size(MAX_VALUES_PER_MESSAGE, 0)
)
"""Bytes the values of one STORE may take: the body budget less the key and the list headers."""


def store_bodies(key: int, values: Sequence[WireValue]) -> list[list[Any]]:
    """The STORE bodies ``[key, [value, ...]]`` that carry ``values``, each fitting a datagram."""
    key_bytes = ids.to_bytes(key)
    return [
        [key_bytes, [v.to_wire() for v in run]] for run in split_values(values, STORE_VALUES_BUDGET)
    ]


def found_body(values: Sequence[WireValue], contacts: Sequence[Contact]) -> list[Any]:
    """A FIND_VALUE answer ``[[value, ...], [contact, ...], more]`` that fits one datagram.

    ``values`` are the ones after the requester's cursor, in cursor order; the answer carries as
    many as fit, and ``more`` says whether some were left out (the requester asks again from the
    last one it got).
    """
    wired = [contact_to_wire(c) for c in contacts]
    if not values:
        return [[], wired, False]
    # A bound on the contacts' size without encoding them twice: each is a bytes value of at most
    # 277 bytes, so its tag and length take at most 3 bytes.
    contacts_bound = sum(map(len, wired)) + 3 * len(wired)
    overhead = wire.list_size(3, wire.list_size(len(wired), contacts_bound) + 1) + wire.list_size(
        MAX_VALUES_PER_MESSAGE, 0
    )
    runs = split_values(values, BODY_BUDGET - overhead)
    return [[v.to_wire() for v in runs[0]], wired, len(runs) > 1]


def parse_target(body: list[Any]) -> int:
    (target,) = _list(body, 1)
    return parse_id(target)


def parse_find_value(body: list[Any], max_bytes: int) -> tuple[int, bytes | None]:
    """FIND_VALUE ``[key, after]``: the key, and the cursor (None: from the first value)."""
    target, after = _list(body, 2)
    return parse_id(target), None if after is None else parse_bytes(after, max_bytes)


def parse_store(body: list[Any], max_count: int, max_bytes: int) -> tuple[int, list[WireValue]]:
    key, values = _list(body, 2)
    return parse_id(key), parse_values(values, max_count, max_bytes)


MAX_AVOID = 32
"""Ids a BROADCAST names as not answering, at most (the first ones found are kept)."""


@dataclass(frozen=True)
class BroadcastRequest:
    """BROADCAST body (Delgado Peris 2014 §III.B): the message, the range to cover, and the time
    left; beyond the paper, ``avoid``: nodes that did not acknowledge it upstream, which the
    recipient does not forward it to (its routing table may not know yet that they died)."""

    bid: bytes
    topic: str
    payload: Any
    block: Block
    budget: float
    depth: int
    avoid: tuple[int, ...] = ()

    def to_wire(self) -> list[Any]:
        body = [
            self.bid,
            self.topic,
            self.payload,
            ids.to_bytes(self.block.low),
            self.block.prefix_len,
            round(self.budget * 1000),
            self.depth,
        ]
        if self.avoid:
            body.append([ids.to_bytes(i) for i in self.avoid[:MAX_AVOID]])
        return body


def parse_broadcast(body: list[Any]) -> BroadcastRequest:
    """``[bid, topic, payload, low, prefix_len, budget_ms, depth]`` and, when some nodes are to
    be avoided, ``[id, ...]`` after them."""
    if not isinstance(body, list) or len(body) not in (7, 8):
        raise ProtocolError("expected a list of 7 or 8 items")
    bid, topic, payload, low, prefix_len, budget_ms, depth = body[:7]
    avoid: tuple[int, ...] = ()
    if len(body) == 8:
        listed = _list(body[7])
        if len(listed) > MAX_AVOID:
            raise ProtocolError("too many ids to avoid")
        avoid = tuple(parse_id(i) for i in listed)
    if not isinstance(bid, bytes) or not 8 <= len(bid) <= 32:
        raise ProtocolError("bad broadcast id")
    if not isinstance(topic, str) or len(topic) > 255:
        raise ProtocolError("bad topic")
    try:
        block = Block.checked(parse_id(low), _int(prefix_len))
    except ValueError as exc:
        raise ProtocolError(str(exc)) from exc
    budget = _int(budget_ms) / 1000
    depth = _int(depth)
    if budget <= 0 or not 0 <= depth <= ids.ID_BITS:
        raise ProtocolError("bad broadcast budget or depth")
    return BroadcastRequest(bid, topic, payload, block, budget, depth, avoid)


def parse_broadcast_reply(body: list[Any]) -> tuple[bytes, Any, bool, bool]:
    """[bid, value, complete, merged]; an unmerged value is a list of parts."""
    bid, value, complete, merged = _list(body, 4)
    if not isinstance(bid, bytes) or not isinstance(complete, bool) or not isinstance(merged, bool):
        raise ProtocolError("bad broadcast reply")
    if not merged and not isinstance(value, list):
        raise ProtocolError("unmerged broadcast reply is not a list")
    return bid, value, complete, merged


def parse_remove(body: list[Any], max_count: int, max_bytes: int) -> tuple[int, list[bytes]]:
    """REMOVE ``[key, [value, ...]]``: the key and the values' bytes to withdraw."""
    key, values = _list(body, 2)
    items = _list(values)
    if len(items) > max_count:
        raise ProtocolError("too many values")
    return parse_id(key), [parse_bytes(item, max_bytes) for item in items]


def remove_bodies(key: int, values: Sequence[bytes]) -> list[list[Any]]:
    """The REMOVE bodies that carry ``values`` (the same runs as a STORE of them)."""
    wired = [WireValue(data, 0, 0.0) for data in values]
    key_bytes = ids.to_bytes(key)
    return [[key_bytes, [v.data for v in run]] for run in split_values(wired, STORE_VALUES_BUDGET)]


def parse_message(body: list[Any]) -> tuple[str, Any]:
    """MESSAGE ``[topic, payload]``."""
    topic, payload = _list(body, 2)
    if not isinstance(topic, str) or not topic or len(topic) > 255:
        raise ProtocolError("bad topic")
    return topic, payload


def parse_answer(body: list[Any]) -> Any:
    """A MESSAGE response ``[answer]``."""
    (answer,) = _list(body, 1)
    return answer


def parse_flag(body: list[Any]) -> bool:
    (flag,) = _list(body, 1)
    if not isinstance(flag, bool):
        raise ProtocolError("expected a boolean")
    return flag


def parse_count(body: list[Any]) -> int:
    (count,) = _list(body, 1)
    return _int(count)


def parse_found(
    body: list[Any], k: int, max_count: int, max_bytes: int
) -> tuple[list[WireValue], list[Contact], bool]:
    """A FIND_VALUE answer: values, contacts, and whether the holder has more values."""
    values, contacts, more = _list(body, 3)
    if not isinstance(more, bool):
        raise ProtocolError("expected a boolean")
    return parse_values(values, max_count, max_bytes), parse_contacts(contacts, k), more
