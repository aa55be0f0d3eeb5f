"""Peer request authentication, Range parsing and adler32 formatting (pure parts of the peer)."""

from __future__ import annotations

import zlib

import pytest

from glidein_ext.cache import peerauth
from glidein_ext.cache.checksum import FileMeta, format_adler32, parse_adler32
from glidein_ext.cache.httprange import Unsatisfiable, parse_range
from glidein_ext.errors import TransferError

KEY = b"k" * 32


def test_a_signed_request_verifies_only_for_its_method_path_and_key() -> None:
    header = peerauth.authorization(KEY, "GET", "/cache/store/a", 1000.0)
    assert peerauth.verify(KEY, header, "GET", "/cache/store/a", 1010.0)
    assert not peerauth.verify(KEY, header, "GET", "/cache/store/b", 1010.0)
    assert not peerauth.verify(KEY, header, "HEAD", "/cache/store/a", 1010.0)
    assert not peerauth.verify(b"o" * 32, header, "GET", "/cache/store/a", 1010.0)
    assert not peerauth.verify(KEY, None, "GET", "/cache/store/a", 1010.0)
    assert not peerauth.verify(KEY, "Basic eDp5", "GET", "/cache/store/a", 1010.0)


def test_old_or_future_requests_are_refused() -> None:
    header = peerauth.authorization(KEY, "GET", "/p", 1000.0)
    assert not peerauth.verify(KEY, header, "GET", "/p", 1061.0)
    assert not peerauth.verify(KEY, header, "GET", "/p", 939.0)


@pytest.mark.parametrize(
    ("header", "size", "expected"),
    [
        (None, 100, None),
        ("bytes=0-9", 100, (0, 9)),
        ("bytes=90-", 100, (90, 99)),
        ("bytes=-10", 100, (90, 99)),
        ("bytes=-1000", 100, (0, 99)),
        ("bytes=50-1000", 100, (50, 99)),
        ("bytes=0-1,5-6", 100, None),  # several ranges: the whole file
        ("items=0-1", 100, None),
        ("bytes=9-1", 100, None),
        # thousands of digits: no int() of the text (Python's digit limit), the RFC's answer
        ("bytes=0-" + "9" * 5000, 100, (0, 99)),
        ("bytes=-" + "9" * 5000, 100, (0, 99)),
        ("bytes=" + "0" * 5000 + "7-" + "0" * 4000 + "8", 100, (7, 8)),
        ("bytes=" + "9" * 5000 + "-1", 100, None),  # last before first: ignored
        ("bytes=\u0663-", 100, None),  # only ASCII digits are numbers
    ],
)
def test_range_parsing(header: str | None, size: int, expected: tuple[int, int] | None) -> None:
    assert parse_range(header, size) == expected


@pytest.mark.parametrize(
    ("header", "size"),
    [
        ("bytes=100-", 100),
        ("bytes=-0", 100),
        ("bytes=-5", 0),
        ("bytes=" + "9" * 5000 + "-", 100),
        ("bytes=" + "9" * 19 + "-" + "9" * 5000, 2**62),
    ],
)
def test_unsatisfiable_ranges(header: str, size: int) -> None:
    with pytest.raises(Unsatisfiable):
        parse_range(header, size)


def test_adler32_text_form_and_check() -> None:
    value = zlib.adler32(b"Wikipedia")
    assert format_adler32(value) == "11e60398"
    assert parse_adler32("11E60398") == value
    with pytest.raises(ValueError):
        parse_adler32("xyz")
    meta = FileMeta(9, value)
    meta.check(9, value, "f")
    with pytest.raises(TransferError, match="size 8 bytes, expected 9"):
        meta.check(8, value, "f")
    with pytest.raises(TransferError, match="adler32 00000001, expected 11e60398"):
        meta.check(9, 1, "f")
