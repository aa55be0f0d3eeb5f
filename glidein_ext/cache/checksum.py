"""Adler-32, the WLCG file checksum: streaming computation and its 8-hex-digit text form.

WLCG storage (dCache, EOS, XRootD, Rucio) records adler32 of every file; the peer client compares
a fetched file against it (Delgado Peris 2014, III.A: a fetched replica must be the file the job
asked for).
"""

from __future__ import annotations

import functools
import os
import re
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from glidein_ext.errors import TransferError

ADLER32_START = 1
ADLER32_BASE = 65521  # the largest prime below 2**16; both sums are kept modulo it (RFC 1950)
CHUNK = 4 * 1024 * 1024
_HEX8 = re.compile(r"^[0-9a-f]{8}$")


def format_adler32(value: int) -> str:
    """The conventional text form: 8 lowercase hex digits, zero-padded."""
    return f"{value & 0xFFFFFFFF:08x}"


def parse_adler32(text: str) -> int:
    """Parse an 8-hex-digit adler32 (any case); raise ValueError otherwise."""
    folded = text.strip().lower()
    if not _HEX8.match(folded):
        raise ValueError(f"not an adler32 checksum (8 hex digits): {text!r}")
    return int(folded, 16)


def adler32_bytes(data: bytes | bytearray | memoryview, value: int = ADLER32_START) -> int:
    """Continue an adler32 over ``data`` (start with ADLER32_START)."""
    return zlib.adler32(data, value)


Adler32Function = Callable[..., int]  # (data, value=1) -> int, as zlib.adler32


@functools.cache
def adler32_backend(fast: bool = True) -> tuple[str, Adler32Function]:
    """(name, function) of the adler32 used for transfers: ISA-L's (python-isal, SIMD, about
    five times less CPU than zlib's) when ``fast`` and it is installed, else the standard
    library's zlib.  Both give the same value; the choice only changes the CPU spent."""
    if fast:
        try:
            from isal import isal_zlib  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            pass
        else:
            return "isal", isal_zlib.adler32  # type: ignore[no-any-return,unused-ignore]
    return "zlib", zlib.adler32


def adler32_combine(first: int, second: int, second_length: int) -> int:
    """The adler32 of A+B from adler32(A), adler32(B) and len(B), as zlib's adler32_combine.

    With (a1, b1) the sums over A and (a2, b2) those over B (each started at a=1, b=0), going on
    over B from (a1, b1) adds the bytes of B to a, and to b each of B's running sums, which
    started at a1 instead of 1:  a = a1 + a2 - 1,  b = b1 + b2 + len(B) * (a1 - 1)  (mod 65521).
    So chunks of a file can be summed separately (on several threads) and combined in order.
    """
    if second_length < 0:
        raise ValueError(f"a length cannot be negative: {second_length}")
    a1, b1 = first & 0xFFFF, (first >> 16) & 0xFFFF
    a2, b2 = second & 0xFFFF, (second >> 16) & 0xFFFF
    a = (a1 + a2 - 1) % ADLER32_BASE
    b = (b1 + b2 + second_length * (a1 - 1)) % ADLER32_BASE
    return (b << 16) | a


def adler32_of_pieces(pieces: Iterable[tuple[int, int, int]], size: int) -> int:
    """The adler32 of ``size`` bytes from the sums of its pieces, ``(offset, length, adler32)``
    in any order; ValueError unless the pieces cover ``0..size`` exactly, without gaps or
    overlaps (a piece never received, or received twice, can never pass for the file)."""
    value = ADLER32_START
    position = 0
    for offset, length, piece in sorted(pieces):
        if offset != position:
            raise ValueError(f"pieces do not tile the file: one starts at {offset}, not {position}")
        value = adler32_combine(value, piece, length)
        position += length
    if position != size:
        raise ValueError(f"pieces cover {position} bytes of {size}")
    return value


def plan_chunks(first: int, end: int, chunk: int) -> list[tuple[int, int]]:
    """Split bytes ``first..end-1`` into ``(offset, length)`` pieces of ``chunk`` bytes (the last
    one shorter); none for an empty span."""
    if chunk < 1:
        raise ValueError(f"a chunk must be at least 1 byte, got {chunk}")
    if first < 0 or end < first:
        raise ValueError(f"not a span of bytes: {first}..{end}")
    return [(offset, min(chunk, end - offset)) for offset in range(first, end, chunk)]


def adler32_file(path: str | os.PathLike[str]) -> int:
    """Adler32 of a whole file; OS errors become TransferError."""
    try:
        with open(path, "rb", buffering=0) as handle:
            return adler32_handle(handle)
    except OSError as exc:
        raise TransferError(f"cannot read {path}: {exc.strerror or exc}") from exc


def adler32_handle(handle: BinaryIO) -> int:
    """Adler32 of an open file from its current position to its end (OSError passes through)."""
    value = ADLER32_START
    view = memoryview(bytearray(CHUNK))
    while True:
        n = handle.readinto(view)  # type: ignore[attr-defined]
        if not n:
            return value
        value = zlib.adler32(view[:n], value)


@dataclass(frozen=True)
class FileMeta:
    """What a correct copy of a file looks like: its size and adler32."""

    size: int
    adler32: int

    @property
    def adler32_hex(self) -> str:
        return format_adler32(self.adler32)

    def check(self, size: int, adler32: int, what: str) -> None:
        """Raise TransferError naming ``what`` if the size or checksum differ."""
        if size != self.size:
            raise TransferError(f"{what}: size {size} bytes, expected {self.size}")
        if adler32 != self.adler32:
            raise TransferError(
                f"{what}: adler32 {format_adler32(adler32)}, expected {self.adler32_hex}"
            )


def meta_of_file(path: Path) -> FileMeta:
    """Size and adler32 of a local file."""
    value = adler32_file(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise TransferError(f"cannot stat {path}: {exc.strerror or exc}") from exc
    return FileMeta(size, value)
