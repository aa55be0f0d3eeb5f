"""160-bit node and key identifiers and the XOR metric (Kademlia paper, section 2.1)."""

from __future__ import annotations

import hashlib
import secrets

ID_BITS = 160
ID_BYTES = ID_BITS // 8
ID_SPACE = 1 << ID_BITS


def random_id() -> int:
    """A uniformly random 160-bit identifier."""
    return secrets.randbits(ID_BITS)


def key_id(key: str | bytes) -> int:
    """The id of a key: SHA-1 of its name (Delgado Peris 2014 §III.A: "the key is the hash of the
    file name")."""
    data = key.encode() if isinstance(key, str) else key
    return int.from_bytes(hashlib.sha1(data, usedforsecurity=False).digest(), "big")


def distance(a: int, b: int) -> int:
    """Kademlia's XOR distance."""
    return a ^ b


def bucket_index(own: int, other: int) -> int:
    """Index i of the k-bucket holding ``other``: its distance lies in [2**i, 2**(i+1)).

    -1 for ``own`` itself, which no bucket holds.
    """
    return (own ^ other).bit_length() - 1


def to_bytes(ident: int) -> bytes:
    """Big-endian 20-byte form used on the wire."""
    return ident.to_bytes(ID_BYTES, "big")


def from_bytes(data: bytes) -> int:
    """Inverse of :func:`to_bytes`; raises ValueError on a wrong length."""
    if len(data) != ID_BYTES:
        raise ValueError(f"an id has {ID_BYTES} bytes, not {len(data)}")
    return int.from_bytes(data, "big")


def parse_hex(text: str) -> int:
    """An id written as up to 40 hex digits; raises ValueError otherwise."""
    value = int(text, 16)
    if not 0 <= value < ID_SPACE or len(text) > ID_BYTES * 2:
        raise ValueError(f"not a 160-bit hex id: {text!r}")
    return value


def to_hex(ident: int) -> str:
    """40 hex digits."""
    return f"{ident:040x}"
