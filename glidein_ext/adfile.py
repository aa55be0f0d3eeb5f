"""Safe reading and atomic writing of old-style ad files (`key = value` lines).

`.pilot.ad` and `.site.ad` cross a trust boundary (Sfiligoi 2013, "Communication channel" and
"Requesting pilot termination"): the site cron runs as root and reads files a pilot wrote, the pilot
reads files a site wrote.  So the reader

- refuses symlinks (``O_NOFOLLOW``) and anything but a regular file (FIFOs are opened non-blocking
  and rejected after ``fstat``, so they never hang the reader),
- caps the size (64 KiB by default),
- accepts only the keys of the file's schema (case-insensitively, like ClassAd attribute names) and
  only integer literals (decimal, 64-bit) or boolean literals (``true``/``false``, any case),
- tolerates CRLF line ends, blank lines and ``#`` comment lines,
- rejects the whole file on the first bad line, with path and line number in one error.

Never an expression, a string, or an unknown key passes through: a value that comes out of
:func:`read_ad` can be printed into a ClassAd as is.

The writer writes a temporary file in the same directory, fsyncs it, renames it over the target and
fsyncs the directory, so a reader sees the old file or the new one, never a torn one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import Union

from glidein_ext.errors import AdFileError, AdFileMissing

MAX_AD_BYTES = 64 * 1024
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

AdValue = Union[int, bool]


class Kind(Enum):
    """The literal types an ad file may carry."""

    INT = "integer"
    BOOL = "boolean"


@dataclass(frozen=True)
class Schema:
    """The known keys of one ad file and the literal type of each."""

    name: str
    keys: Mapping[str, Kind]

    def canonical(self, key: str) -> str | None:
        """The schema's spelling of ``key`` (matched case-insensitively), or None if unknown."""
        return self._folded.get(key.lower())

    @cached_property
    def _folded(self) -> dict[str, str]:
        return {k.lower(): k for k in self.keys}


_LINE = re.compile(r"^[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*(.*?)[ \t]*$")
_INT = re.compile(r"^[+-]?[0-9]{1,20}$")


def parse_literal(text: str, kind: Kind) -> AdValue:
    """Parse one literal of ``kind``; raise ValueError with a reason if it is anything else."""
    if kind is Kind.BOOL:
        folded = text.lower()
        if folded == "true":
            return True
        if folded == "false":
            return False
        raise ValueError(f"expected a boolean literal (true or false), got {_shorten(text)!r}")
    if not _INT.match(text):
        raise ValueError(f"expected an integer literal, got {_shorten(text)!r}")
    value = int(text, 10)
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError("integer out of the 64-bit range")
    return value


def parse_ad_text(text: str, schema: Schema, path: str = "<text>") -> dict[str, AdValue]:
    """Parse ad file text against ``schema``; see the module docstring for the rules."""
    values: dict[str, AdValue] = {}
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw[:-1] if raw.endswith("\r") else raw
        stripped = line.strip(" \t")
        if not stripped or stripped.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise AdFileError(path, "not a 'key = value' line", number)
        key, literal = match.group(1), match.group(2)
        canonical = schema.canonical(key)
        if canonical is None:
            raise AdFileError(path, f"unknown key {key!r} for {schema.name}", number)
        if canonical in values:
            raise AdFileError(path, f"duplicate key {canonical}", number)
        try:
            values[canonical] = parse_literal(literal, schema.keys[canonical])
        except ValueError as exc:
            raise AdFileError(path, f"{canonical}: {exc}", number) from None
    return values


def read_bounded(path: str, max_bytes: int = MAX_AD_BYTES) -> tuple[bytes, os.stat_result]:
    """Read a small regular file without following a symlink; return its bytes and its stat.

    Raises AdFileMissing if it does not exist, AdFileError for a symlink, a non-regular file, a file
    over ``max_bytes`` or an OS error.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise AdFileMissing(path, "no such file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise AdFileError(path, "is a symbolic link; refused") from None
        raise AdFileError(path, f"cannot open: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise AdFileError(path, f"is not a regular file ({_file_type(st.st_mode)}); refused")
        if st.st_size > max_bytes:
            raise AdFileError(path, f"is {st.st_size} bytes, over the {max_bytes}-byte limit")
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            total += len(chunk)
            if total > max_bytes:
                raise AdFileError(path, f"grew over the {max_bytes}-byte limit while being read")
            chunks.append(chunk)
        return b"".join(chunks), st
    except OSError as exc:
        raise AdFileError(path, f"cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)


def decode_ad_bytes(data: bytes, path: str) -> str:
    """Decode ad file bytes: ASCII/UTF-8 text without NUL bytes."""
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        raise AdFileError(path, "contains a NUL byte", line)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise AdFileError(path, "is not valid UTF-8 text", line) from None


def read_ad(path: str, schema: Schema, max_bytes: int = MAX_AD_BYTES) -> dict[str, AdValue]:
    """Read and validate an ad file; the values are safe to publish as ClassAd literals."""
    values, _ = read_ad_with_stat(path, schema, max_bytes)
    return values


def read_ad_with_stat(
    path: str, schema: Schema, max_bytes: int = MAX_AD_BYTES
) -> tuple[dict[str, AdValue], os.stat_result]:
    """Like :func:`read_ad`, also returning the file's stat (its mtime is the pilot's heartbeat)."""
    data, st = read_bounded(path, max_bytes)
    return parse_ad_text(decode_ad_bytes(data, path), schema, path), st


def format_literal(value: AdValue) -> str:
    """The ClassAd literal for an ad value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(int(value))


def format_ad(values: Mapping[str, AdValue], schema: Schema) -> str:
    """Render validated values as ad file text (keys in schema order)."""
    unknown = [k for k in values if k not in schema.keys]
    if unknown:
        raise ValueError(f"unknown keys for {schema.name}: {', '.join(sorted(unknown))}")
    lines = []
    for key, kind in schema.keys.items():
        if key not in values:
            continue
        value = values[key]
        if kind is Kind.BOOL and not isinstance(value, bool):
            raise ValueError(f"{key} must be a boolean")
        if kind is Kind.INT and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{key} must be an integer")
        if kind is Kind.INT and not INT64_MIN <= value <= INT64_MAX:
            raise ValueError(f"{key} is out of the 64-bit range")
        lines.append(f"{key} = {format_literal(value)}\n")
    return "".join(lines)


def write_ad(
    path: str,
    values: Mapping[str, AdValue],
    schema: Schema,
    *,
    mtime: int | None = None,
    mode: int = 0o644,
) -> None:
    """Atomically write ``values`` to ``path``: temp file in the same directory, fsync, rename.

    ``mtime``, when given, is set on the file before the rename, so readers that use the mtime as
    the time the values were computed for (the heartbeat) see exactly that time.
    """
    text = format_ad(values, schema)
    write_text_atomic(path, text, mtime=mtime, mode=mode)


def write_text_atomic(path: str, text: str, *, mtime: int | None = None, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` atomically (see :func:`write_ad`)."""
    directory = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise AdFileError(path, f"cannot create a temporary file: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        if mtime is not None:
            os.utime(tmp, (mtime, mtime))
        os.replace(tmp, path)
    except OSError as exc:
        _unlink_quietly(tmp)
        raise AdFileError(path, f"cannot write: {exc.strerror}") from None
    _fsync_dir(directory)


def _fsync_dir(directory: str) -> None:
    try:
        dfd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass  # some filesystems do not support fsync on directories; the rename is still atomic
    finally:
        os.close(dfd)


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _file_type(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _shorten(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
