"""A cached file's location as the site DHT stores it (Delgado Peris 2014 §III.A), pure.

"When a new file is produced, the pilot stores a key-value pair in the DHT, where the key is the
hash of the file name, and the value is its location."  Here the key is the LFN (the DHT hashes
it) and the value names the pilot's peer file server and the file's size and adler32 as the
publisher had it, so a fetcher checks a copy against what was published: a copy corrupted on a
peer's disk after publication is caught even though that peer's server would describe the
corrupt copy::

    <pilot id> <host> <port> <size> <adler32 as 8 hex digits>

Python 3.9, standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from glidein_ext.cache.checksum import FileMeta, format_adler32, parse_adler32


@dataclass(frozen=True)
class Location:
    """Where a replica is: the publishing pilot, its peer file server, and the file's meta."""

    pilot_id: int
    host: str
    port: int
    meta: FileMeta

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    def encode(self) -> bytes:
        digest = format_adler32(self.meta.adler32)
        return f"{self.pilot_id} {self.host} {self.port} {self.meta.size} {digest}".encode()


def decode(value: bytes) -> Location | None:
    """The location in a DHT value; None for a value that is not one (logged by the caller)."""
    try:
        pilot, host, port, size, digest = value.decode("ascii").split(" ")
        location = Location(int(pilot), host, int(port), FileMeta(int(size), parse_adler32(digest)))
    except (UnicodeDecodeError, ValueError):
        return None
    if not 0 < location.port < 65536 or location.meta.size < 0 or not host:
        return None
    return location
