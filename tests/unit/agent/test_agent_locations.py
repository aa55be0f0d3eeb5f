"""A file's location as the site DHT stores it (Delgado Peris 2014 §III.A): the published server
and checksum, and strict decoding."""

from __future__ import annotations

from glidein_ext.agent.locations import Location, decode
from glidein_ext.cache.checksum import FileMeta


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
