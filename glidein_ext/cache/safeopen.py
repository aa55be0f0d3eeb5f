"""Open or remove a cached file without following a link out of the cache (Delgado Peris 2014,
III.A).

The peer file server serves ``data/<LFN>`` to other pilots.  Anyone who can write into the cache
(a job, another pilot on the host) could swap a cached file, or one of its parent directories,
for a symbolic link to ``/etc/passwd`` or to the pilot's key; the server must then refuse rather
than serve it.  :func:`open_beneath` therefore

- walks the name one directory at a time from an open descriptor of ``data/``, each step with
  ``O_NOFOLLOW | O_DIRECTORY`` (a symlinked parent gives ``ENOTDIR``),
- opens the file itself with ``O_NOFOLLOW`` (a symlink gives ``ELOOP``) and ``O_NONBLOCK`` (so a
  FIFO swapped in cannot block the server), and accepts only a regular file,
- and, against a directory renamed out of the tree during the walk, checks that the path the
  kernel reports for the open descriptor (``/proc/self/fd``) still lies under ``data/``.

It raises :class:`OSError` (``FileNotFoundError`` when the file is gone, ``PermissionError`` for
anything that is not a regular file inside the cache); the server turns these into HTTP answers.

:func:`unlink_beneath` removes a cached name by the same walk, so evicting a file whose directory
was swapped for a link never deletes a file outside the cache, and evicting a symlink removes the
link, not its target.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _refuse(relative: str, why: str) -> PermissionError:
    return PermissionError(errno.EACCES, f"{why}: {relative!r}")


def _parts(relative: str) -> list[str]:
    parts = relative.split("/")
    if any(part in {"", ".", ".."} for part in parts):
        raise _refuse(relative, "not a plain relative name")
    return parts


def open_beneath(base: Path, relative: str) -> BinaryIO:
    """Open ``base/relative`` for reading, following no symbolic link below ``base``.

    ``relative`` is a checked LFN without its leading slash (no empty, '.' or '..' part).
    """
    parts = _parts(relative)
    dir_fd = _walk(base, parts[:-1])
    try:
        fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(relative, "not a regular file")
        _check_inside(base, fd, relative)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def unlink_beneath(base: Path, relative: str) -> bool:
    """Remove the name ``base/relative`` (a link itself, never its target); True if it was the
    last hard link of a regular file (Hasham 2011, IV.D: the file leaves the host)."""
    parts = _parts(relative)
    dir_fd = _walk(base, parts[:-1])
    try:
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            os.unlink(parts[-1], dir_fd=dir_fd)  # a symlink swapped in: drop the link only
            return False
        try:
            os.unlink(parts[-1], dir_fd=dir_fd)
            st = os.fstat(fd)
            return stat.S_ISREG(st.st_mode) and st.st_nlink == 0
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


def _walk(base: Path, directories: list[str]) -> int:
    """A descriptor of ``base/directories...``, opened step by step without symlinks."""
    dir_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in directories:
            next_fd = os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
            os.close(dir_fd)
            dir_fd = next_fd
    except BaseException:
        os.close(dir_fd)
        raise
    return dir_fd


def _check_inside(base: Path, fd: int, relative: str) -> None:
    try:
        opened = os.readlink(f"/proc/self/fd/{fd}")
    except OSError as exc:  # no /proc: fail closed rather than serve an unchecked file
        raise _refuse(relative, f"cannot check where the file lies ({exc.strerror})") from exc
    root = os.path.realpath(base)
    if os.path.commonpath([root, opened]) != root:
        raise _refuse(relative, "the file lies outside the cache")
