"""The wire format: msgpack messages authenticated with a per-site HMAC.

A datagram is ``msgpack([version, kind, flags, sender, timestamp_ms, nonce, reply_to, body])``
followed by a tag: HMAC-SHA256 over the encoded bytes with the site key, truncated to
``tag_bytes`` (beyond the seed; the key is handed out at join).  ``nonce`` is 8 random bytes, the
request identifier as well; a response carries its request's nonce in ``reply_to`` and the request
kind with the RESPONSE bit.  Bodies are lists, checked by the ``parse_*`` helpers below; anything
malformed raises :class:`ProtocolError` and is dropped by the caller.
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import msgpack  # type: ignore[import-untyped]

from glidein_ext.dht import ids
from glidein_ext.dht.contact import Contact
from glidein_ext.dht.regions import Block
from glidein_ext.errors import DhtError

VERSION = 1
NONCE_BYTES = 8
MAX_DATAGRAM = 65000
FLAG_READ_ONLY = 1
"""A client that never stores nor routes: receivers keep it out of their routing tables."""


class Kind(IntEnum):
    """Message kinds; the six RPCs of the issue plus the broadcast's upward reply."""

    PING = 1
    STORE = 2
    FIND_NODE = 3
    FIND_VALUE = 4
    LEAVE = 5
    BROADCAST = 6
    BROADCAST_REPLY = 7  # one-way, child to parent (seed III.B)


RESPONSE = 0x80


class ProtocolError(ValueError):
    """A datagram that is not a well-formed message of this protocol."""


class AuthError(ProtocolError):
    """A datagram whose HMAC tag does not verify with the site key."""


@dataclass(frozen=True, slots=True)
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
        header = [
            VERSION,
            int(kind) | (RESPONSE if response else 0),
            FLAG_READ_ONLY if read_only else 0,
            ids.to_bytes(sender),
            round(timestamp * 1000),
            nonce,
            reply_to,
            body,
        ]
        packed: bytes = msgpack.packb(header, use_bin_type=True)
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
        try:
            fields = msgpack.unpackb(packed, raw=False, ext_hook=_no_ext)
        except (ValueError, msgpack.UnpackException) as exc:
            raise ProtocolError(f"not msgpack: {exc}") from exc
        if not isinstance(fields, list) or len(fields) != 8:
            raise ProtocolError("header is not an 8-element list")
        version, kind_code, flags, sender, ts_ms, nonce, reply_to, body = fields
        if version != VERSION:
            raise ProtocolError(f"unsupported version {version!r}")
        kind_int = _int(kind_code)
        try:
            kind = Kind(kind_int & ~RESPONSE)
        except ValueError as exc:
            raise ProtocolError(f"unknown kind {kind_int}") from exc
        if not isinstance(nonce, bytes) or len(nonce) != NONCE_BYTES:
            raise ProtocolError("bad nonce")
        response = bool(kind_int & RESPONSE)
        if response != isinstance(reply_to, bytes) or (reply_to is not None and not response):
            raise ProtocolError("reply_to must be set on responses only")
        if not isinstance(body, list):
            raise ProtocolError("body is not a list")
        return Message(
            kind=kind,
            response=response,
            sender=parse_id(sender),
            timestamp=_int(ts_ms) / 1000,
            nonce=nonce,
            reply_to=reply_to,
            body=body,
            read_only=bool(_int(flags) & FLAG_READ_ONLY),
        )


def _no_ext(code: int, data: bytes) -> Any:
    raise ProtocolError(f"msgpack extension type {code} is not part of the protocol")


# --- body helpers: wire values to checked Python values ------------------------------------------


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError(f"expected an integer, got {type(value).__name__}")
    return value


def _num(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProtocolError(f"expected a number, got {type(value).__name__}")
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


def contact_to_wire(contact: Contact) -> list[Any]:
    return [ids.to_bytes(contact.id), contact.host, contact.port]


def parse_contact(value: object) -> Contact:
    # Hot path (a lookup answer carries k contacts): the checks are written out.
    if type(value) is not list or len(value) != 3:
        raise ProtocolError("a contact is a list of 3 items")
    ident, host, port = value
    if type(ident) is not bytes or len(ident) != ids.ID_BYTES:
        raise ProtocolError("bad id")
    if type(host) is not str or not 0 < len(host) <= 255:
        raise ProtocolError("bad host")
    if type(port) is not int or not 0 < port <= 65535:
        raise ProtocolError("bad port")
    return Contact(int.from_bytes(ident, "big"), host, port)


def parse_contacts(value: object, limit: int) -> list[Contact]:
    items = _list(value)
    if len(items) > limit:
        raise ProtocolError("too many contacts")
    return [parse_contact(item) for item in items]


@dataclass(frozen=True, slots=True)
class WireValue:
    """A value as it travels: its bytes, its owner, its remaining lifetime in seconds."""

    data: bytes
    owner: int
    ttl: float

    def to_wire(self) -> list[Any]:
        return [self.data, ids.to_bytes(self.owner), self.ttl]


def parse_values(value: object, max_count: int, max_bytes: int) -> list[WireValue]:
    items = _list(value)
    if len(items) > max_count:
        raise ProtocolError("too many values")
    found = []
    for item in items:
        data, owner, ttl = _list(item, 3)
        found.append(WireValue(parse_bytes(data, max_bytes), parse_id(owner), _num(ttl)))
    return found


def parse_target(body: list[Any]) -> int:
    (target,) = _list(body, 1)
    return parse_id(target)


def parse_store(body: list[Any], max_count: int, max_bytes: int) -> tuple[int, list[WireValue]]:
    key, values = _list(body, 2)
    return parse_id(key), parse_values(values, max_count, max_bytes)


@dataclass(frozen=True, slots=True)
class BroadcastRequest:
    """BROADCAST body (seed III.B): the message, the range to cover, and the time left."""

    bid: bytes
    topic: str
    payload: Any
    block: Block
    budget: float
    depth: int

    def to_wire(self) -> list[Any]:
        return [
            self.bid,
            self.topic,
            self.payload,
            ids.to_bytes(self.block.low),
            self.block.prefix_len,
            round(self.budget * 1000),
            self.depth,
        ]


def parse_broadcast(body: list[Any]) -> BroadcastRequest:
    bid, topic, payload, low, prefix_len, budget_ms, depth = _list(body, 7)
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
    return BroadcastRequest(bid, topic, payload, block, budget, depth)


def parse_broadcast_reply(body: list[Any]) -> tuple[bytes, Any, bool, bool]:
    """[bid, value, complete, merged]; an unmerged value is a list of parts."""
    bid, value, complete, merged = _list(body, 4)
    if not isinstance(bid, bytes) or not isinstance(complete, bool) or not isinstance(merged, bool):
        raise ProtocolError("bad broadcast reply")
    if not merged and not isinstance(value, list):
        raise ProtocolError("unmerged broadcast reply is not a list")
    return bid, value, complete, merged


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
) -> tuple[list[WireValue], list[Contact]]:
    values, contacts = _list(body, 2)
    return parse_values(values, max_count, max_bytes), parse_contacts(contacts, k)
