"""What the master and its workers tell each other, and a file's location in the site DHT
(Delgado Peris 2014 §III): round trips through the DHT's wire format, and strict decoding."""

from __future__ import annotations

import pytest

from glidein_ext.agent import messages
from glidein_ext.agent.locations import Location, decode
from glidein_ext.cache.checksum import FileMeta
from glidein_ext.dht import wire
from glidein_ext.tq.client.protocol import Completion, TaskAssignment


def _travel(value: object) -> object:
    return wire.decode(wire.encode(value))


def test_messages_travel_and_come_back_equal() -> None:
    hello = messages.Hello(7, ("10.0.0.7", 4001), 40, 2)
    assert messages.decode_hello(_travel(messages.encode_hello(hello))) == hello
    task = TaskAssignment(40, 2, "w1-s1-0003", "sh -c 'x'", ("/store/a",), ("/store/b",), 600, 0)
    assert messages.decode_assign(_travel(messages.encode_assign(5, task))) == (5, task)
    done = Completion(40, 2, 0, ("/store/b",), "log", 10.0, 12.5, {"peer": 1})
    assert messages.decode_done(_travel(messages.encode_done(7, done))) == (7, done)
    long = Completion(41, 1, 1, (), "x" * 10_000)
    _, decoded = messages.decode_done(_travel(messages.encode_done(7, long)))
    assert decoded.report == "x" * messages.REPORT_CHARS  # the tail of a long report
    successors = ((8, ("10.0.0.8", 4008)), (13, ("10.0.0.13", 4013)))
    assert messages.decode_resign(_travel(messages.encode_resign(successors))) == successors


@pytest.mark.parametrize(
    ("decode", "payload"),
    [
        (messages.decode_hello, [7, "h", 4001, 0]),
        (messages.decode_hello, [7, "h", "4001", 0, 0]),
        (messages.decode_assign, [5, 40, 2, "n", "c", "/store/a", [], 600]),
        (messages.decode_assign, [5, 40, True, "n", "c", [], [], 600]),
        (messages.decode_done, [7, 40, 2, 0, [], "r", None, None, []]),
        (messages.decode_done, [7, 40, 2, 0, [], "r", "t", None, {}]),
        (messages.decode_done, None),
        (messages.decode_resign, None),
        (messages.decode_resign, [[8, "h"]]),
        (messages.decode_resign, [[8, "h", "4008"]]),
    ],
)
def test_malformed_messages_are_refused(decode: object, payload: object) -> None:
    with pytest.raises(ValueError):
        decode(payload)  # type: ignore[operator]


def test_a_location_names_the_server_and_the_published_checksum() -> None:
    location = Location(12, "10.0.0.12", 40123, FileMeta(1234, 0x0A0B0C0D))
    value = location.encode()
    assert value == b"12 10.0.0.12 40123 1234 0a0b0c0d"
    assert decode(value) == location
    assert location.address == ("10.0.0.12", 40123)
    for bad in (
        b"",
        b"12 h 0 1 0a0b0c0d",
        b"12 h 80 -1 0a0b0c0d",
        b"x h 80 1 0a0b0c0d",
        b"12 h 80 1 xyz",
        b"\xff",
        b"12  80 1 0a0b0c0d",
    ):
        assert decode(bad) is None
