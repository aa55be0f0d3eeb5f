"""adler32 of pieces: combining (zlib's adler32_combine) and the chunk plan of a transfer."""

from __future__ import annotations

import os
import random
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glidein_ext.cache.checksum import (
    ADLER32_BASE,
    ADLER32_START,
    adler32_backend,
    adler32_combine,
    adler32_of_pieces,
    plan_chunks,
)

EDGE_LENGTHS = [0, 1, 2, 5551, 5552, ADLER32_BASE - 1, ADLER32_BASE, ADLER32_BASE + 1, 2 * 65521]


@pytest.mark.parametrize("first_length", EDGE_LENGTHS)
@pytest.mark.parametrize("second_length", EDGE_LENGTHS)
def test_combine_equals_the_sum_of_the_concatenation(first_length: int, second_length: int) -> None:
    rng = random.Random(first_length * 1_000_003 + second_length)
    first = rng.randbytes(first_length)
    second = rng.randbytes(second_length)
    combined = adler32_combine(zlib.adler32(first), zlib.adler32(second), len(second))
    assert combined == zlib.adler32(first + second)


def test_combine_of_bytes_that_push_both_sums_past_the_modulus() -> None:
    first = b"\xff" * (3 * ADLER32_BASE)  # a and b wrap around many times
    second = b"\xff" * (2 * ADLER32_BASE + 17)
    combined = adler32_combine(zlib.adler32(first), zlib.adler32(second), len(second))
    assert combined == zlib.adler32(first + second)


def test_an_empty_second_piece_changes_nothing() -> None:
    value = zlib.adler32(b"some bytes")
    assert adler32_combine(value, ADLER32_START, 0) == value
    assert adler32_combine(ADLER32_START, value, 10) == value


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000), st.binary(max_size=3000))
def test_combine_property(first: bytes, second: bytes) -> None:
    assert adler32_combine(zlib.adler32(first), zlib.adler32(second), len(second)) == zlib.adler32(
        first + second
    )


def test_combine_refuses_a_negative_length() -> None:
    with pytest.raises(ValueError, match="negative"):
        adler32_combine(1, 1, -1)


@pytest.mark.parametrize(
    ("first", "end", "chunk", "plan"),
    [
        (0, 0, 4, []),
        (0, 1, 4, [(0, 1)]),
        (0, 8, 4, [(0, 4), (4, 4)]),
        (0, 9, 4, [(0, 4), (4, 4), (8, 1)]),
        (3, 10, 4, [(3, 4), (7, 3)]),
        (5, 5, 1, []),
    ],
)
def test_plan_chunks(first: int, end: int, chunk: int, plan: list[tuple[int, int]]) -> None:
    assert plan_chunks(first, end, chunk) == plan


@pytest.mark.parametrize(("first", "end", "chunk"), [(0, 10, 0), (-1, 10, 4), (10, 9, 4)])
def test_plan_chunks_refuses_nonsense(first: int, end: int, chunk: int) -> None:
    with pytest.raises(ValueError):
        plan_chunks(first, end, chunk)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=100_000), st.integers(min_value=1, max_value=70_000))
def test_planned_chunks_tile_the_span(size: int, chunk: int) -> None:
    plan = plan_chunks(0, size, chunk)
    assert sum(length for _, length in plan) == size
    assert all(0 < length <= chunk for _, length in plan)
    assert [offset for offset, _ in plan] == list(range(0, size, chunk))


def test_pieces_in_any_order_combine_into_the_file_sum() -> None:
    data = os.urandom(3 * ADLER32_BASE + 1234)
    pieces = [(o, n, zlib.adler32(data[o : o + n])) for o, n in plan_chunks(0, len(data), 40_000)]
    random.Random(7).shuffle(pieces)
    assert adler32_of_pieces(pieces, len(data)) == zlib.adler32(data)
    assert adler32_of_pieces([], 0) == ADLER32_START


def test_pieces_with_a_gap_an_overlap_or_a_short_end_are_refused() -> None:
    data = os.urandom(100)
    whole = [(0, 50, zlib.adler32(data[:50])), (50, 50, zlib.adler32(data[50:]))]
    with pytest.raises(ValueError, match="starts at 50"):
        adler32_of_pieces(whole[1:], 100)  # the first half never arrived
    with pytest.raises(ValueError, match="starts at 50"):
        adler32_of_pieces([*whole, whole[1]], 100)  # the second half twice
    with pytest.raises(ValueError, match="cover 50 bytes of 100"):
        adler32_of_pieces(whole[:1], 100)
    with pytest.raises(ValueError, match="cover 100 bytes of 120"):
        adler32_of_pieces(whole, 120)


def test_the_stdlib_backend_is_zlib() -> None:
    assert adler32_backend(fast=False) == ("zlib", zlib.adler32)


def test_the_fast_backend_gives_zlibs_values() -> None:
    name, adler32 = adler32_backend()
    if name == "zlib":
        pytest.skip("python-isal is not installed: the fast backend is zlib itself")
    data = os.urandom(3 * ADLER32_BASE + 99)
    assert name == "isal"
    assert adler32(data) == zlib.adler32(data)
    assert adler32(memoryview(data)[5:], 12345) == zlib.adler32(data[5:], 12345)
    assert adler32(b"") == ADLER32_START
