"""Ids, the XOR metric, and address parsing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from glidein_ext.dht import ids
from glidein_ext.dht.contact import Contact, parse_address

any_id = st.integers(min_value=0, max_value=ids.ID_SPACE - 1)


@given(any_id)
def test_bytes_round_trip(ident: int) -> None:
    data = ids.to_bytes(ident)
    assert len(data) == ids.ID_BYTES
    assert ids.from_bytes(data) == ident


@given(any_id, any_id)
def test_bucket_index_bounds_the_distance(a: int, b: int) -> None:
    index = ids.bucket_index(a, b)
    if a == b:
        assert index == -1
    else:
        assert 2**index <= ids.distance(a, b) < 2 ** (index + 1)


def test_key_id_is_sha1_of_the_name() -> None:
    assert ids.key_id("file.root") == ids.key_id(b"file.root")
    assert ids.to_hex(ids.key_id("")) == "da39a3ee5e6b4b0d3255bfef95601890afd80709"


def test_from_bytes_rejects_wrong_length() -> None:
    with pytest.raises(ValueError, match="20 bytes"):
        ids.from_bytes(b"\x00" * 19)


def test_parse_hex() -> None:
    assert ids.parse_hex("ff") == 255
    assert ids.parse_hex(ids.to_hex(ids.ID_SPACE - 1)) == ids.ID_SPACE - 1
    for bad in ("zz", "1" * 41, "-1"):
        with pytest.raises(ValueError):
            ids.parse_hex(bad)


def test_random_ids_differ() -> None:
    assert len({ids.random_id() for _ in range(100)}) == 100


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:80", ("127.0.0.1", 80)),
        ("[::1]:9", ("::1", 9)),
        ("node.site:0", ("node.site", 0)),
    ],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["127.0.0.1", ":80", "host:", "host:x", "host:70000", "host:-1"])
def test_parse_address_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_address(text)


def test_contact_str_is_short() -> None:
    assert str(Contact(0xABCDEF << 136, "h", 1)) == "abcdef00@h:1"
