"""The wire format: encoding, HMAC authentication, and robustness against bad datagrams."""

from __future__ import annotations

import contextlib
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glidein_ext.dht import ids, protocol
from glidein_ext.dht.contact import Contact
from glidein_ext.dht.protocol import (
    AuthError,
    BroadcastRequest,
    Codec,
    Kind,
    ProtocolError,
    WireValue,
)
from glidein_ext.dht.regions import Block
from glidein_ext.dht.settings import DhtSettings
from glidein_ext.errors import DhtError

KEY = b"0123456789abcdef-site-key"
codec = Codec(KEY)


def test_round_trip_request_and_response() -> None:
    datagram, nonce = codec.encode(Kind.FIND_NODE, 42, [ids.to_bytes(7)], timestamp=1000.5)
    msg = codec.decode(datagram)
    assert (msg.kind, msg.response, msg.sender, msg.nonce) == (Kind.FIND_NODE, False, 42, nonce)
    assert msg.timestamp == 1000.5
    assert protocol.parse_target(msg.body) == 7
    reply, _ = codec.encode(
        Kind.FIND_NODE, 43, [[]], timestamp=1, response=True, reply_to=nonce, read_only=True
    )
    answer = codec.decode(reply)
    assert answer.response and answer.reply_to == nonce and answer.read_only


def test_wrong_key_and_tampering_fail_authentication() -> None:
    datagram, _ = codec.encode(Kind.PING, 1, [], timestamp=1)
    with pytest.raises(AuthError):
        Codec(b"another key of the site!!").decode(datagram)
    for position in (0, len(datagram) // 2, len(datagram) - 1):
        bad = bytearray(datagram)
        bad[position] ^= 1
        with pytest.raises(AuthError):
            codec.decode(bytes(bad))


def test_short_key_is_refused() -> None:
    with pytest.raises(DhtError):
        Codec(b"short")


def test_oversized_message_is_refused() -> None:
    with pytest.raises(DhtError, match="datagram"):
        codec.encode(Kind.BROADCAST, 1, [b"x" * 70000], timestamp=1)


def signed(fields: Any) -> bytes:
    """A datagram with a valid tag around arbitrary (maybe malformed) msgpack."""
    packed: bytes = msgpack.packb(fields, use_bin_type=True)
    return packed + codec._tag(packed)


GOOD = [1, Kind.PING, 0, ids.to_bytes(1), 0, b"n" * 8, None, []]


@pytest.mark.parametrize(
    "fields",
    [
        "not a list",
        GOOD[:7],
        [2, *GOOD[1:]],
        [1, 99, *GOOD[2:]],
        [1, "1", *GOOD[2:]],
        [*GOOD[:3], b"short", *GOOD[4:]],
        [*GOOD[:5], b"n", *GOOD[6:]],
        [*GOOD[:6], b"n" * 8, []],  # reply_to on a request
        [1, Kind.PING | protocol.RESPONSE, *GOOD[2:]],  # response without reply_to
        [*GOOD[:7], {"a": 1}],
        [*GOOD[:4], True, *GOOD[5:]],
    ],
)
def test_malformed_headers_are_protocol_errors(fields: Any) -> None:
    with pytest.raises(ProtocolError):
        codec.decode(signed(fields))


def test_extension_types_and_garbage_are_protocol_errors() -> None:
    ext = msgpack.packb(msgpack.ExtType(5, b"x"))
    with pytest.raises(ProtocolError):
        codec.decode(ext + codec._tag(ext))
    garbage = b"\xc1\xc1"
    with pytest.raises(ProtocolError):
        codec.decode(garbage + codec._tag(garbage))
    with pytest.raises(ProtocolError):
        codec.decode(b"tiny")


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_random_bytes_only_ever_raise_protocol_errors(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        codec.decode(data)
    with contextlib.suppress(ProtocolError):
        codec.decode(data + codec._tag(data))


msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.binary(max_size=30)
    | st.text(max_size=10)
    | st.floats(allow_nan=False),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300)
@given(st.lists(msgpack_values, max_size=9))
def test_body_parsers_reject_malformed_bodies_with_protocol_errors(body: list[Any]) -> None:
    s = DhtSettings()
    parsers = [
        protocol.parse_target,
        lambda b: protocol.parse_store(b, s.max_values_per_key, s.max_value_bytes),
        lambda b: protocol.parse_found(b, 20, s.max_values_per_key, s.max_value_bytes),
        protocol.parse_broadcast,
        protocol.parse_broadcast_reply,
        protocol.parse_flag,
        protocol.parse_count,
    ]
    for parse in parsers:
        with contextlib.suppress(ProtocolError):
            parse(body)


def test_store_and_found_bodies_round_trip() -> None:
    value = WireValue(b"host:/path", 9, 30.0)
    key, values = protocol.parse_store([ids.to_bytes(5), [value.to_wire()]], 10, 100)
    assert (key, values) == (5, [value])
    contact = Contact(3, "10.1.2.3", 9618)
    found = protocol.parse_found(
        [[value.to_wire()], [protocol.contact_to_wire(contact)]], 20, 10, 100
    )
    assert found == ([value], [contact])
    with pytest.raises(ProtocolError):
        protocol.parse_store([ids.to_bytes(5), [WireValue(b"x" * 101, 9, 1).to_wire()]], 10, 100)
    with pytest.raises(ProtocolError):
        protocol.parse_contacts([protocol.contact_to_wire(contact)] * 3, limit=2)
    with pytest.raises(ProtocolError):
        protocol.parse_contact([ids.to_bytes(1), "h", 0])


def test_broadcast_body_round_trip_and_checks() -> None:
    request = BroadcastRequest(b"b" * 16, "tasks", {"n": [1, 2]}, Block(1 << 159, 1), 2.5, 3)
    assert protocol.parse_broadcast(request.to_wire()) == request
    misaligned = request.to_wire()
    misaligned[3] = ids.to_bytes(1)
    with pytest.raises(ProtocolError, match="aligned"):
        protocol.parse_broadcast(misaligned)
    expired = request.to_wire()
    expired[5] = 0
    with pytest.raises(ProtocolError):
        protocol.parse_broadcast(expired)
