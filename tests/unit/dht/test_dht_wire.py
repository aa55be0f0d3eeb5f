"""The body encoding: round trips, exact sizes, limits, and hostile bytes."""

from __future__ import annotations

import contextlib
import enum
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glidein_ext.dht import wire
from glidein_ext.errors import DhtError

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.binary(max_size=300)
    | st.text(max_size=50)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=6)
        | st.dictionaries(st.text(max_size=5) | st.binary(max_size=5), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=400)
@given(values)
def test_round_trip(value: Any) -> None:
    assert wire.decode(wire.encode(value)) == value


@pytest.mark.parametrize(
    ("value", "size"),
    [
        (None, 1),
        (True, 1),
        (0, 1),
        (127, 1),
        (128, 3),
        (65535, 4),
        (2**64 - 1, 11),
        (-1, 2),
        (-(2**63), 10),
        (1.5, 9),
        (b"", 2),
        (b"x" * 127, 129),
        (b"x" * 128, 131),
        ("é", 4),
        ([], 2),
        ({"a": 1}, 6),
    ],
)
def test_encoded_sizes(value: Any, size: int) -> None:
    encoded = wire.encode(value)
    assert len(encoded) == size
    if isinstance(value, int) and not isinstance(value, bool):
        assert wire.int_size(value) == size
    if isinstance(value, (bytes, str)):
        assert wire.bytes_size(len(value.encode() if isinstance(value, str) else value)) == size


def test_subclasses_and_tuples_travel_as_their_plain_types() -> None:
    class Colour(enum.IntEnum):
        RED = 3

    class Name(str, enum.Enum):
        A = "a"

    assert wire.decode(wire.encode([Colour.RED, Name.A, (1, 2), bytearray(b"z")])) == [
        3,
        "a",
        [1, 2],
        b"z",
    ]
    assert math.isinf(wire.decode(wire.encode(float("inf"))))


@pytest.mark.parametrize(
    "value", [2**64, -(2**63) - 1, {1.5: 0}, {(1,): 0}, {True: 0}, object(), {1, 2}]
)
def test_what_the_format_cannot_carry_is_a_dht_error(value: Any) -> None:
    with pytest.raises(DhtError):
        wire.encode(value)


def test_nesting_is_limited() -> None:
    deep: Any = []
    for _ in range(wire.MAX_DEPTH - 1):
        deep = [deep]
    assert wire.decode(wire.encode(deep)) == deep
    with pytest.raises(DhtError, match="nest"):
        wire.encode([deep])
    with pytest.raises(DhtError, match="nest"):
        wire.encode({"k": deep})


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x06\x05abc",  # bytes shorter than their length
        b"\x08\x03\x00",  # list shorter than its count
        b"\x08\xff\xff\xff\xff\x0f",  # a count of 2**32 with nothing behind it
        b"\x09\x02\x81\x00",  # map shorter than its count
        b"\x03" + b"\x80" * 10 + b"\x01",  # varint over 10 bytes
        b"\x03\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f",  # 2**70 - 1: out of range
        b"\x04" + b"\x80" * 9 + b"\x01",  # -1 - 2**63: below the range
        b"\x05\x00\x00",  # truncated float
        b"\x0b",  # unknown tag
        b"\x00\x00",  # trailing bytes
        b"\x08\x01" * 40 + b"\x00",  # nested too deep
        b"\x09\x01" * 40 + b"\x00",  # maps too
    ],
)
def test_malformed_bytes_are_decode_errors(data: bytes) -> None:
    with pytest.raises(wire.DecodeError):
        wire.decode(data)


@settings(max_examples=500)
@given(st.binary(max_size=200))
def test_random_bytes_only_ever_raise_decode_errors(data: bytes) -> None:
    with contextlib.suppress(wire.DecodeError):
        wire.decode(data)


@settings(max_examples=300)
@given(values, st.data())
def test_mangled_encodings_only_ever_raise_decode_errors(value: Any, data: st.DataObject) -> None:
    encoded = bytearray(wire.encode(value))
    position = data.draw(st.integers(0, len(encoded) - 1))
    encoded[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(encoded)))
    with contextlib.suppress(wire.DecodeError):
        wire.decode(bytes(encoded[:cut]))
