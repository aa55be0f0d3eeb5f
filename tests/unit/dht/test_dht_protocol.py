"""The wire format: encoding, HMAC authentication, and robustness against bad datagrams."""

from __future__ import annotations

import contextlib
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glidein_ext.dht import ids, protocol, wire
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
    with pytest.raises(DhtError, match="cannot travel"):
        codec.encode(Kind.BROADCAST, 1, [{1, 2}], timestamp=1)


def test_the_header_is_39_bytes_and_a_response_adds_its_request_nonce() -> None:
    # version, kind, flags, sender(20), timestamp_ms(8), nonce(8); then the body; then the tag.
    ping, nonce = codec.encode(Kind.PING, 1, [], timestamp=1)
    assert len(ping) == 39 + len(wire.encode([])) + codec.tag_bytes == 57
    assert ping[:3] == bytes([protocol.VERSION, Kind.PING, 0])
    assert ping[23:31] == struct.pack(">Q", 1000) and ping[31:39] == nonce
    pong, _ = codec.encode(Kind.PING, 2, [], timestamp=1, response=True, reply_to=nonce)
    assert len(pong) == len(ping) + 8 and pong[39:47] == nonce


def signed(packed: bytes) -> bytes:
    """A datagram with a valid tag around arbitrary (maybe malformed) bytes."""
    return packed + codec._tag(packed)


def header(
    version: int = protocol.VERSION, kind: int = Kind.PING, flags: int = 0, sender: bytes = b""
) -> bytes:
    return protocol.HEADER.pack(version, kind, flags, sender or ids.to_bytes(1), 0, b"n" * 8)


EMPTY_BODY = wire.encode([])


@pytest.mark.parametrize(
    "packed",
    [
        b"",
        header()[:38],
        header(version=1) + EMPTY_BODY,  # msgpack days
        header(version=3) + EMPTY_BODY,
        header(kind=99) + EMPTY_BODY,
        header(kind=0) + EMPTY_BODY,
        header(kind=Kind.PING | protocol.RESPONSE) + b"nnnn",  # response without its reply_to
        header(),  # no body
        header() + wire.encode({"a": 1}),  # body is not a list
        header() + wire.encode("[]"),
        header() + EMPTY_BODY + b"\x00",  # trailing bytes
        header() + b"\x08\x05\x00",  # list of 5, one item given
        header() + b"\x0a",  # unknown tag
        header() + b"\x08" + b"\xff" * 11,  # over-long varint
        header() + b"\x08\x01\x07\x02\xff\xfe",  # invalid UTF-8
        header() + b"\x08\x01\x09\x02\x81\x00\x81\x00",  # duplicate map key
        header() + b"\x08\x01\x09\x01\x08\x00\x00",  # unhashable map key
        header() + b"\x08\x01" * 40 + b"\x08\x00",  # nested too deep
    ],
)
def test_malformed_datagrams_are_protocol_errors(packed: bytes) -> None:
    with pytest.raises(ProtocolError):
        codec.decode(signed(packed))


def test_garbage_is_a_protocol_error() -> None:
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


wire_values = st.recursive(
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
@given(st.lists(wire_values, max_size=9))
def test_body_parsers_reject_malformed_bodies_with_protocol_errors(body: list[Any]) -> None:
    s = DhtSettings()
    parsers = [
        protocol.parse_target,
        lambda b: protocol.parse_store(b, s.max_values_per_key, s.max_value_bytes),
        lambda b: protocol.parse_found(b, 20, s.max_values_per_key, s.max_value_bytes),
        lambda b: protocol.parse_find_value(b, s.max_value_bytes),
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
        [[value.to_wire()], [protocol.contact_to_wire(contact)], False], 20, 10, 100
    )
    assert found == ([value], [contact], False)
    assert protocol.parse_find_value([ids.to_bytes(5), None], 100) == (5, None)
    assert protocol.parse_find_value([ids.to_bytes(5), b"after"], 100) == (5, b"after")
    with pytest.raises(ProtocolError):
        protocol.parse_store([ids.to_bytes(5), [WireValue(b"x" * 101, 9, 1).to_wire()]], 10, 100)
    with pytest.raises(ProtocolError):
        protocol.parse_contacts([protocol.contact_to_wire(contact)] * 3, limit=2)
    for bad in (
        [ids.to_bytes(1), "h", 1],  # the list form of version 1
        ids.to_bytes(1) + b"\x00\x00h",  # port 0
        ids.to_bytes(1) + b"\x00\x01",  # no host
        ids.to_bytes(1) + b"\x00\x01\xff",  # host not UTF-8
        ids.to_bytes(1) + b"\x00\x01" + b"h" * 256,  # host too long
    ):
        with pytest.raises(ProtocolError):
            protocol.parse_contact(bad)
    for ttl in (float("nan"), float("inf")):  # a value that would never expire
        with pytest.raises(ProtocolError, match="finite"):
            protocol.parse_values([[b"x", ids.to_bytes(9), ttl]], 10, 100)


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


def test_broadcast_body_names_the_nodes_to_avoid() -> None:
    block = Block(1 << 159, 1)
    request = BroadcastRequest(b"b" * 16, "tasks", None, block, 2.5, 3, ((1 << 159) | 7, 1 << 159))
    wired = request.to_wire()
    assert len(wired) == 8
    assert protocol.parse_broadcast(wired) == request
    # Without nodes to avoid the body keeps its seven items.
    assert len(BroadcastRequest(b"b" * 16, "tasks", None, block, 2.5, 3).to_wire()) == 7
    too_many = [*wired[:7], [ids.to_bytes(i) for i in range(protocol.MAX_AVOID + 1)]]
    with pytest.raises(ProtocolError, match="too many"):
        protocol.parse_broadcast(too_many)
    for bad in ([*wired[:7], [b"short"]], [*wired[:7], b"not a list"], [*wired, []]):
        with pytest.raises(ProtocolError):
            protocol.parse_broadcast(bad)


def test_wire_sizes_are_exact() -> None:
    for length in (0, 1, 127, 128, 1024, 16384):
        value = WireValue(b"v" * length, 2**160 - 1, 86400.0)
        assert value.wire_size == len(wire.encode(value.to_wire()))


def test_contacts_travel_as_one_short_bytes_value() -> None:
    contacts = [Contact(i << 140, f"10.0.{i}.1", 1 + i * 997) for i in range(20)]
    contacts.append(Contact(5, "wn-héllo.example.org", 65535))
    contacts.append(Contact(2**160 - 1, "h" * 255, 9618))
    wired = [protocol.contact_to_wire(c) for c in contacts]
    assert len(wired[0]) == 20 + 2 + len("10.0.0.1")
    assert protocol.parse_contacts(wire.decode(wire.encode(wired)), 256) == contacts


def values_of(count: int, length: int) -> list[WireValue]:
    return [WireValue(f"{i:05d}".encode().ljust(length, b"x"), 7, 60.0) for i in range(count)]


def test_store_bodies_split_to_the_datagram_budget() -> None:
    # 400 values of 250 bytes are ~110 KB, more than one datagram.
    values = values_of(400, 250)
    bodies = protocol.store_bodies(5, values)
    assert len(bodies) == 2
    carried = []
    for body in bodies:
        datagram, _ = codec.encode(Kind.STORE, 1, body, timestamp=1)
        assert len(datagram) <= protocol.MAX_DATAGRAM
        key, part = protocol.parse_store(codec.decode(datagram).body, 2048, 1024)
        assert key == 5
        carried += part
    assert carried == values
    # One run while it fits; runs are cut by count as well.
    assert len(protocol.store_bodies(5, values[:10])) == 1
    runs = protocol.split_values(values_of(25, 5), protocol.STORE_VALUES_BUDGET, max_count=10)
    assert [len(run) for run in runs] == [10, 10, 5]
    with pytest.raises(DhtError, match="does not fit"):
        protocol.split_values([WireValue(b"x" * 70000, 1, 1.0)], protocol.STORE_VALUES_BUDGET)


def test_a_find_value_answer_is_a_page_that_fits_a_datagram() -> None:
    values = values_of(400, 1024)
    contacts = [Contact((i + 1) << 100, "192.168.100.200", 65000 + i) for i in range(20)]
    body = protocol.found_body(values, contacts)
    datagram, _ = Codec(KEY, tag_bytes=32).encode(
        Kind.FIND_VALUE, 1, body, timestamp=1, response=True, reply_to=b"r" * 8
    )
    assert len(datagram) <= protocol.MAX_DATAGRAM
    page, got_contacts, more = protocol.parse_found(body, 20, 2048, 1024)
    assert more and got_contacts == contacts
    assert page == values[: len(page)] and 55 <= len(page) < 64
    assert protocol.found_body(values[:3], contacts)[2] is False
    assert protocol.found_body([], []) == [[], [], False]
