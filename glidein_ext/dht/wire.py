"""The compact binary encoding of message bodies (beyond the paper; standard library only).

Every value is one tag byte followed by its payload::

    0x00 None        0x01 False        0x02 True
    0x03 uint        varint n                      0 <= n < 2**64
    0x04 negint      varint (-1 - n)               -2**63 <= n < 0
    0x05 float       8 bytes, IEEE 754 double, big-endian
    0x06 bytes       varint length, then the bytes
    0x07 str         varint length, then UTF-8
    0x08 list        varint count, then the items
    0x09 map         varint count, then key and value of each (keys: str, bytes or int)
    0x80 | n         the integer n, 0 <= n < 128, in one byte

``varint`` is unsigned LEB128 (seven bits a byte, low bits first, at most 10 bytes).  Tuples encode
as lists.  Containers nest at most :data:`MAX_DEPTH` deep.  The sizes are exact and known in
advance (:func:`bytes_size`), so senders can split what they send to the datagram budget.

Decoding is strict: a truncated value, trailing bytes, an unknown tag, an over-long varint, a count
larger than the bytes left, invalid UTF-8, nesting deeper than :data:`MAX_DEPTH` or an unhashable
or duplicate map key all raise :class:`DecodeError`, never anything else.  Pure code.
"""

from __future__ import annotations

import struct
from typing import Any

from glidein_ext.errors import DhtError

MAX_DEPTH = 32
"""Deepest nesting of lists and maps, so that a hostile datagram cannot exhaust the stack."""

_NONE, _FALSE, _TRUE, _UINT, _NEGINT, _FLOAT, _BYTES, _STR, _LIST, _MAP = range(10)
_FIXINT = 0x80
_DOUBLE = struct.Struct(">d")
_UINT_LIMIT = 1 << 64
_NEGINT_LIMIT = -(1 << 63)
_MAX_VARINT_BYTES = 10


class DecodeError(ValueError):
    """Bytes that are not one well-formed encoded value."""


def encode(value: object) -> bytes:
    """The encoding of ``value``; raises DhtError for what the format cannot carry."""
    out = bytearray()
    _encode(value, out, 0)
    return bytes(out)


def decode(data: bytes, start: int = 0) -> Any:
    """The one value encoded in ``data[start:]``; raises DecodeError."""
    try:
        value, end = _decode(data, start, 0)
    except IndexError as exc:  # a tag or a varint byte read past the end
        raise DecodeError("truncated value") from exc
    if end != len(data):
        raise DecodeError(f"{len(data) - end} trailing bytes")
    return value


def varint_size(n: int) -> int:
    """Bytes of the varint of ``n`` (n >= 0)."""
    return max(1, (n.bit_length() + 6) // 7)


def bytes_size(length: int) -> int:
    """Encoded size of a bytes or UTF-8 str value of ``length`` bytes."""
    return 1 + varint_size(length) + length


def list_size(count: int, items_size: int) -> int:
    """Encoded size of a list of ``count`` items whose encodings add up to ``items_size``."""
    return 1 + varint_size(count) + items_size


FLOAT_SIZE = 1 + _DOUBLE.size


# --- encoding ------------------------------------------------------------------------------------


def _varint(n: int, out: bytearray) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _encode_int(value: int, out: bytearray) -> None:
    if 0 <= value < 0x80:
        out.append(_FIXINT | value)
    elif 0 <= value < _UINT_LIMIT:
        out.append(_UINT)
        _varint(value, out)
    elif _NEGINT_LIMIT <= value < 0:
        out.append(_NEGINT)
        _varint(-1 - value, out)
    else:
        raise DhtError(f"integer {value} is outside the 64-bit range the DHT carries")


def _encode(value: object, out: bytearray, depth: int) -> None:
    # Exact type checks first (the common case, and bool is not taken for int), then subclasses.
    if type(value) is bytes:
        out.append(_BYTES)
        _varint(len(value), out)
        out += value
    elif type(value) is int:
        _encode_int(value, out)
    elif type(value) is list or type(value) is tuple:
        if depth >= MAX_DEPTH:
            raise DhtError(f"values nest deeper than {MAX_DEPTH} levels")
        out.append(_LIST)
        _varint(len(value), out)
        for item in value:
            # The hot path inline (contacts, values, headers of bodies): short bytes, small ints,
            # None and booleans.
            if type(item) is bytes and len(item) < 0x80:
                out.append(_BYTES)
                out.append(len(item))
                out += item
            elif type(item) is int and 0 <= item < _FIXINT:
                out.append(_FIXINT | item)
            elif item is None:
                out.append(_NONE)
            elif item is True or item is False:
                out.append(_TRUE if item else _FALSE)
            else:
                _encode(item, out, depth + 1)
    elif type(value) is str:
        data = value.encode()
        out.append(_STR)
        _varint(len(data), out)
        out += data
    elif value is None:
        out.append(_NONE)
    elif type(value) is bool:
        out.append(_TRUE if value else _FALSE)
    elif type(value) is float:
        out.append(_FLOAT)
        out += _DOUBLE.pack(value)
    elif type(value) is dict:
        _encode_map(value, out, depth)
    else:
        _encode_other(value, out, depth)


def _encode_map(value: dict[Any, Any], out: bytearray, depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise DhtError(f"values nest deeper than {MAX_DEPTH} levels")
    out.append(_MAP)
    _varint(len(value), out)
    for key, item in value.items():
        if isinstance(key, bool) or not isinstance(key, (str, bytes, int)):
            raise DhtError(f"a map key must be str, bytes or int, not {type(key).__name__}")
        _encode(key, out, depth + 1)
        _encode(item, out, depth + 1)


def _encode_other(value: object, out: bytearray, depth: int) -> None:
    """Subclasses of the plain types (an IntEnum, a str Enum, a bytearray)."""
    if isinstance(value, bool):
        out.append(_TRUE if value else _FALSE)
    elif isinstance(value, int):
        _encode_int(int(value), out)
    elif isinstance(value, float):
        _encode(float(value), out, depth)
    elif isinstance(value, str):
        data = value.encode()  # the string itself, not str() of an Enum member
        out.append(_STR)
        _varint(len(data), out)
        out += data
    elif isinstance(value, (bytes, bytearray, memoryview)):
        _encode(bytes(value), out, depth)
    elif isinstance(value, (list, tuple)):
        _encode(list(value), out, depth)
    elif isinstance(value, dict):
        _encode_map(value, out, depth)
    else:
        raise DhtError(f"a {type(value).__name__} cannot travel in a DHT message")


# --- decoding ------------------------------------------------------------------------------------


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    result = byte & 0x7F
    shift = 7
    for at in range(pos + 1, pos + _MAX_VARINT_BYTES):
        byte = data[at]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, at + 1
        shift += 7
    raise DecodeError("over-long varint")


def _read_chunk(data: bytes, pos: int) -> tuple[bytes, int]:
    length, pos = _read_varint(data, pos)
    end = pos + length
    if end > len(data):
        raise DecodeError("truncated bytes")
    return data[pos:end], end


def _decode(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
    tag = data[pos]
    pos += 1
    if tag >= _FIXINT:
        return tag & 0x7F, pos
    if tag == _BYTES:
        return _read_chunk(data, pos)
    if tag == _LIST:
        return _decode_list(data, pos, depth)
    if tag == _STR:
        chunk, pos = _read_chunk(data, pos)
        try:
            return chunk.decode(), pos
        except UnicodeDecodeError as exc:
            raise DecodeError("invalid UTF-8") from exc
    if tag == _NONE:
        return None, pos
    if tag in (_FALSE, _TRUE):
        return tag == _TRUE, pos
    if tag == _UINT:
        value, pos = _read_varint(data, pos)
        if value >= _UINT_LIMIT:
            raise DecodeError("integer out of range")
        return value, pos
    if tag == _NEGINT:
        value, pos = _read_varint(data, pos)
        if -1 - value < _NEGINT_LIMIT:
            raise DecodeError("integer out of range")
        return -1 - value, pos
    if tag == _FLOAT:
        end = pos + _DOUBLE.size
        if end > len(data):
            raise DecodeError("truncated float")
        return _DOUBLE.unpack_from(data, pos)[0], end
    if tag == _MAP:
        return _decode_map(data, pos, depth)
    raise DecodeError(f"unknown tag {tag:#04x}")


def _decode_list(data: bytes, pos: int, depth: int) -> tuple[list[Any], int]:
    if depth >= MAX_DEPTH:
        raise DecodeError("values nest too deep")
    count, pos = _read_varint(data, pos)
    size = len(data)
    if count > size - pos:
        raise DecodeError("list count larger than the bytes left")
    items: list[Any] = []
    append = items.append
    for _ in range(count):
        # Lists of contacts and of values are the hot path: their items (small ints, short
        # bytes and strings, lists) are decoded inline; everything else goes through _decode.
        tag = data[pos]
        if tag >= _FIXINT:
            append(tag & 0x7F)
            pos += 1
        elif tag in (_BYTES, _STR) and data[pos + 1] < 0x80:
            start = pos + 2
            pos = start + data[pos + 1]
            if pos > size:
                raise DecodeError("truncated bytes")
            if tag == _BYTES:
                append(data[start:pos])
            else:
                try:
                    append(data[start:pos].decode())
                except UnicodeDecodeError as exc:
                    raise DecodeError("invalid UTF-8") from exc
        elif tag == _LIST:
            item, pos = _decode_list(data, pos + 1, depth + 1)
            append(item)
        elif tag <= _TRUE:
            append(None if tag == _NONE else tag == _TRUE)
            pos += 1
        else:
            item, pos = _decode(data, pos, depth + 1)
            append(item)
    return items, pos


def _decode_map(data: bytes, pos: int, depth: int) -> tuple[dict[Any, Any], int]:
    if depth >= MAX_DEPTH:
        raise DecodeError("values nest too deep")
    count, pos = _read_varint(data, pos)
    if 2 * count > len(data) - pos:
        raise DecodeError("map count larger than the bytes left")
    found: dict[Any, Any] = {}
    for _ in range(count):
        key, pos = _decode(data, pos, depth + 1)
        if isinstance(key, bool) or not isinstance(key, (str, bytes, int)):
            raise DecodeError("a map key must be str, bytes or int")
        if key in found:
            raise DecodeError("duplicate map key")
        found[key], pos = _decode(data, pos, depth + 1)
    return found, pos


def int_size(n: int) -> int:
    """Encoded size of the integer ``n`` (within the 64-bit range)."""
    if 0 <= n < _FIXINT:
        return 1
    return 1 + varint_size(n if n >= 0 else -1 - n)
