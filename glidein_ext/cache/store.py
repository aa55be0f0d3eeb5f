"""The disk side of a pilot's data cache (Hasham 2011, IV.B-IV.D): files, pins, hard links.

Layout under the cache root (the pilot's cache area, IV.C):

- ``data/<lfn without its leading slash>``: the cached files, named like their LFNs, so that
  pilots on one host find each other's files by name (IV.D) and operators can read them;
- ``tmp/``: files being written, named ``<pid>-<start ticks>-<random>.<kind>`` after the process
  writing them; a file appears under ``data/`` only by ``rename`` (atomic insertion: a reader
  sees the whole file or none).  Opening the store removes only the temporaries of processes
  that are gone (a crashed pilot's torn writes), never a live pilot's running transfer;
- ``pins/<sha1 of the lfn>.pin``: "pid lfn" of a file in use by a running job, so that another
  process (``glidein-ext cache evict``, a restarted pilot) leaves it alone while that pid lives.

The LRU decisions come from :class:`glidein_ext.cache.lru.LruIndex`; recency is also kept in the
files' mtimes, so a reopened cache starts from the same order.  Removing a file unlinks one hard
link; when it was the last one (IV.D: "a file is removed from the system only if its last link is
deleted") the ``on_last_link`` callback is told, so the pilot can notify the Task Queue.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from glidein_ext.cache.lru import LruIndex
from glidein_ext.cache.safeopen import unlink_beneath
from glidein_ext.errors import CacheError
from glidein_ext.procs import is_alive, pid_alive, start_ticks

# The on-disk layout (Hasham 2011 §IV.C-IV.D): a cache root holds ``data/`` (an LFN
# ``/store/a.dat`` at ``data/store/a.dat``), ``tmp/`` (transfers in progress, renamed into ``data/``
# when complete) and ``pins/`` (one file per pinned LFN, naming the pid that pins it).  Other
# pilots on the host read a neighbour's ``data/`` to hard-link its files.
DATA_DIR = "data"
TMP_DIR = "tmp"
PINS_DIR = "pins"


def data_file(root: Path, lfn: str) -> Path:
    """Where ``lfn`` lives in the cache at ``root`` (the LFN is checked by the store)."""
    return root / DATA_DIR / lfn.lstrip("/")


log = logging.getLogger(__name__)

MAX_LFN_CHARS = 4096
STALE_TEMP_SECONDS = 24 * 3600  # a tmp/ name not in our form is removed after a day unwritten
LastLinkListener = Callable[[str], None]
_TEMP_NAME = re.compile(r"^([0-9]{1,10})-([0-9]{1,20})-")  # see temp_name


@dataclass(frozen=True)
class CacheEntry:
    """One cached file as listed by :meth:`CacheStore.entries` and :func:`scan_cache`."""

    lfn: str
    size: int
    mtime: float
    links: int
    pinned: bool


def check_lfn(lfn: str) -> str:
    """Return ``lfn`` if it is a safe absolute name (no '.', '..' or empty parts); else raise."""
    if not lfn.startswith("/") or len(lfn) > MAX_LFN_CHARS or "\x00" in lfn:
        raise CacheError(f"not a valid LFN (absolute, at most {MAX_LFN_CHARS} chars): {lfn!r}")
    parts = lfn[1:].split("/")
    if any(part in {"", ".", ".."} for part in parts):
        raise CacheError(f"not a valid LFN (empty, '.' or '..' component): {lfn!r}")
    return lfn


def _pin_name(lfn: str) -> str:
    return hashlib.sha1(lfn.encode(), usedforsecurity=False).hexdigest() + ".pin"


def read_live_pins(root: Path) -> set[str]:
    """LFNs pinned by a live process; pin files of dead processes are removed."""
    pinned: set[str] = set()
    pins = root / PINS_DIR
    try:
        names = os.listdir(pins)
    except FileNotFoundError:
        return pinned
    except OSError as exc:
        raise CacheError(f"cannot list {pins}: {exc.strerror or exc}") from exc
    for name in names:
        path = pins / name
        try:
            text = path.read_text(encoding="utf-8")
            pid_text, _, lfn = text.rstrip("\n").partition(" ")
            pid = int(pid_text)
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if pid_alive(pid):
            pinned.add(lfn)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    return pinned


def temp_name(kind: str) -> str:
    """A fresh name in ``tmp/`` that says which process writes it: ``pid-ticks-random.kind``."""
    pid = os.getpid()
    return f"{pid}-{start_ticks(pid) or 0}-{uuid.uuid4().hex}.{kind}"


def temp_owner_alive(name: str) -> bool | None:
    """Whether the writer of the ``tmp/`` file ``name`` lives; None if the name is not ours."""
    match = _TEMP_NAME.match(name)
    if match is None:
        return None
    return is_alive(int(match.group(1)), int(match.group(2)) or None)


def remove_dead_temporaries(tmp: Path, now: float) -> list[str]:
    """Remove the torn writes of processes that are gone; a live process's file stays.

    Names not in :func:`temp_name`'s form are removed once unwritten for STALE_TEMP_SECONDS.
    """
    removed: list[str] = []
    for name in os.listdir(tmp):
        path = tmp / name
        alive = temp_owner_alive(name)
        try:
            if alive is None:
                alive = now - os.lstat(path).st_mtime < STALE_TEMP_SECONDS
            if not alive:
                os.unlink(path)
                removed.append(name)
        except FileNotFoundError:
            continue  # its writer committed or discarded it meanwhile
    return removed


def scan_cache(root: Path) -> list[CacheEntry]:
    """The files of the cache at ``root``, least recently used (oldest mtime) first."""
    data = root / DATA_DIR
    if not data.is_dir():
        raise CacheError(f"{root} is not a cache directory (no data/ inside)")
    pinned = read_live_pins(root)
    entries: list[CacheEntry] = []
    for dirpath, _dirs, files in os.walk(data):
        for name in files:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise CacheError(f"cannot stat {path}: {exc.strerror or exc}") from exc
            if not stat.S_ISREG(st.st_mode):
                continue
            lfn = "/" + os.path.relpath(path, data).replace(os.sep, "/")
            entries.append(CacheEntry(lfn, st.st_size, st.st_mtime, st.st_nlink, lfn in pinned))
    entries.sort(key=lambda e: (e.mtime, e.lfn))
    return entries


class CacheStore:
    """A pilot's cache directory driven by an :class:`LruIndex`; safe to share between threads."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        capacity: int,
        *,
        on_last_link: LastLinkListener | None = None,
        fsync: bool = True,
    ) -> None:
        self.root = Path(root)
        self.data = self.root / DATA_DIR
        self.tmp = self.root / TMP_DIR
        self.pins = self.root / PINS_DIR
        self._on_last_link = on_last_link
        self._fsync = fsync
        self._lock = threading.RLock()
        self._index = LruIndex(capacity)
        self._own_pins: dict[str, int] = {}
        self._writing: set[str] = set()
        try:
            for directory in (self.data, self.tmp, self.pins):
                directory.mkdir(parents=True, exist_ok=True)
            remove_dead_temporaries(self.tmp, time.time())  # torn writes of a crashed pilot
        except OSError as exc:
            raise CacheError(f"cannot prepare the cache at {self.root}: {exc.strerror}") from exc
        self._load()

    # -- opening -------------------------------------------------------------------------------

    def _load(self) -> None:
        foreign = read_live_pins(self.root)
        for entry in scan_cache(self.root):  # oldest mtime first: the LRU order survives
            self._index.add_over_capacity(entry.lfn, entry.size)
        for lfn in foreign:
            if lfn in self._index:
                self._index.pin(lfn)
        for victim in self._index.shrink_to_fit():
            self._unlink(victim)

    # -- queries -------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return self._index.capacity

    @property
    def used(self) -> int:
        return self._index.used

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, lfn: object) -> bool:
        with self._lock:
            return lfn in self._index and lfn not in self._writing

    def path_of(self, lfn: str) -> Path:
        return self.data / check_lfn(lfn)[1:]

    def peek(self, lfn: str) -> Path | None:
        """The file's path if cached, without making it recently used (the peer server's view)."""
        path = self.path_of(lfn)  # a malformed name is a CacheError even when it is not cached
        with self._lock:
            if lfn not in self._index or lfn in self._writing:
                return None
        return path

    def lookup(self, lfn: str) -> Path | None:
        """The file's path if cached (a hit makes it most recently used), else None."""
        path = self.path_of(lfn)
        with self._lock:
            if lfn in self._writing or not self._index.touch(lfn):
                return None
        with contextlib.suppress(OSError):
            os.utime(path)  # keep the order across restarts; best effort
        return path

    def entries(self) -> list[CacheEntry]:
        """The cached files, least recently used first."""
        with self._lock:
            order = list(self._index.lru_order())
            pinned = {lfn for lfn, _ in order if self._index.is_pinned(lfn)}
        result = []
        for lfn, size in order:
            try:
                st = os.lstat(self.path_of(lfn))
            except OSError:
                continue
            result.append(CacheEntry(lfn, size, st.st_mtime, st.st_nlink, lfn in pinned))
        return result

    # -- insertion (atomic: temp file, then rename) --------------------------------------------

    @contextlib.contextmanager
    def _staged(self, lfn: str, size: int, kind: str) -> Iterator[Path]:
        """Reserve room for ``lfn`` and yield a fresh name in ``tmp/``; when the block succeeds
        the file there is renamed into ``data/``, else it and the reservation are discarded."""
        final = self.path_of(lfn)
        self._reserve(lfn, size)
        tmp = self.tmp / temp_name(kind)
        committed = False
        try:
            yield tmp
            self._commit(lfn, tmp, final)
            committed = True
        finally:
            if not committed:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                self._release(lfn)

    @contextlib.contextmanager
    def writer(self, lfn: str, size: int) -> Iterator[BinaryIO]:
        """Write a new file of exactly ``size`` bytes; it appears in the cache only on success.

        Room is made first (LRU eviction); an exception inside the block, or a size mismatch,
        discards the partial file and the reservation.
        """
        try:
            with self._staged(lfn, size, "part") as tmp:
                try:
                    handle = open(tmp, "xb")  # noqa: SIM115 - closed below on every path
                except OSError as exc:
                    raise CacheError(f"cannot create {tmp}: {exc.strerror}") from exc
                with handle:
                    yield handle
                    handle.flush()
                    written = handle.tell()
                    if written != size:
                        raise CacheError(f"{lfn}: wrote {written} bytes, expected {size}")
                    if self._fsync:
                        os.fsync(handle.fileno())
        except OSError as exc:
            raise CacheError(f"cannot write {lfn} into the cache: {exc.strerror}") from exc

    def insert_file(self, lfn: str, src: str | os.PathLike[str]) -> Path:
        """Copy ``src`` into the cache as ``lfn`` (a job's output, IV.C); return its path."""
        try:
            size = os.stat(src).st_size
        except OSError as exc:
            raise CacheError(f"cannot stat {src}: {exc.strerror}") from exc
        with self.writer(lfn, size) as out, open(src, "rb") as source:
            shutil.copyfileobj(source, out, 4 * 1024 * 1024)
        return self.path_of(lfn)

    def insert_bytes(self, lfn: str, data: bytes) -> Path:
        with self.writer(lfn, len(data)) as out:
            out.write(data)
        return self.path_of(lfn)

    def link_file(self, lfn: str, src: str | os.PathLike[str]) -> Path:
        """Hard-link ``src`` (another pilot's cached file, IV.D) into this cache as ``lfn``."""
        try:
            size = os.stat(src).st_size
            with self._staged(lfn, size, "link") as tmp:
                os.link(src, tmp)
        except OSError as exc:
            raise CacheError(f"cannot hard-link {src} into the cache: {exc.strerror}") from exc
        return self.path_of(lfn)

    def _reserve(self, lfn: str, size: int) -> None:
        check_lfn(lfn)
        with self._lock:
            if lfn in self._writing:
                raise CacheError(f"{lfn} is already being written into the cache")
            if self._index.is_pinned(lfn):
                raise CacheError(f"cannot replace {lfn}: it is in use by a running job")
            victims = self._index.admit(lfn, size)
            self._index.pin(lfn)  # a reservation is never a victim
            self._writing.add(lfn)
            for victim in victims:
                self._unlink(victim)

    def _commit(self, lfn: str, tmp: Path, final: Path) -> None:
        final.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._note_replaced_last_link(lfn, final)
            os.replace(tmp, final)
            self._writing.discard(lfn)
            self._index.unpin(lfn)

    def _release(self, lfn: str) -> None:
        with self._lock:
            if lfn in self._writing:
                self._writing.discard(lfn)
                self._index.remove(lfn)
                self._unlink(lfn)  # a replaced file's old copy is gone from the index too

    def _note_replaced_last_link(self, lfn: str, final: Path) -> None:
        try:
            st = os.lstat(final)
        except OSError:
            return
        if st.st_nlink == 1 and self._on_last_link is not None:
            self._on_last_link(lfn)

    # -- pins ----------------------------------------------------------------------------------

    def pin(self, lfn: str) -> None:
        """Mark ``lfn`` in use by a running job: it is never evicted until unpinned."""
        with self._lock:
            self._index.pin(lfn)
            count = self._own_pins.get(lfn, 0)
            self._own_pins[lfn] = count + 1
            if count == 0:
                try:
                    (self.pins / _pin_name(lfn)).write_text(f"{os.getpid()} {lfn}\n")
                except OSError as exc:
                    self._index.unpin(lfn)
                    del self._own_pins[lfn]
                    raise CacheError(f"cannot record the pin of {lfn}: {exc.strerror}") from exc

    def unpin(self, lfn: str) -> None:
        with self._lock:
            count = self._own_pins.get(lfn, 0)
            if count == 0:
                raise CacheError(f"cannot unpin {lfn}: this pilot did not pin it")
            self._index.unpin(lfn)
            if count == 1:
                del self._own_pins[lfn]
                with contextlib.suppress(OSError):
                    (self.pins / _pin_name(lfn)).unlink()
            else:
                self._own_pins[lfn] = count - 1

    @contextlib.contextmanager
    def pinned(self, lfn: str) -> Iterator[Path]:
        """Pin ``lfn`` for the duration of a job; yields its path."""
        self.pin(lfn)
        try:
            yield self.path_of(lfn)
        finally:
            self.unpin(lfn)

    # -- removal -------------------------------------------------------------------------------

    def evict(self, lfn: str) -> bool:
        """Remove ``lfn`` now; CacheError if pinned; False if it was not cached."""
        with self._lock:
            if self._index.is_pinned(lfn):
                raise CacheError(f"cannot evict {lfn}: it is in use by a running job")
            if not self._index.remove(lfn):
                return False
            self._unlink(lfn)
            return True

    def set_capacity(self, capacity: int) -> list[str]:
        """New capacity (IV.D); returns the files evicted to fit it."""
        with self._lock:
            victims = self._index.set_capacity(capacity)
            for victim in victims:
                self._unlink(victim)
            return victims

    def clear(self) -> list[str]:
        """Remove every unpinned file (a pilot leaving the host); returns the removed LFNs."""
        with self._lock:
            removed = [lfn for lfn, _ in self._index.lru_order() if not self._index.is_pinned(lfn)]
            for lfn in removed:
                self._index.remove(lfn)
                self._unlink(lfn)
            return removed

    def _unlink(self, lfn: str) -> None:
        """Unlink one hard link; report the file if that was its last link (IV.D).

        The name is walked without following links (see safeopen): a symlink swapped into the
        cache is removed itself, and nothing outside ``data/`` is ever unlinked.
        """
        path = self.path_of(lfn)
        try:
            last = unlink_beneath(self.data, lfn[1:])
        except FileNotFoundError:
            return
        except NotADirectoryError:  # a parent directory was swapped for a link or a file
            log.warning("cache: not removing %r: a parent directory is not a directory", lfn)
            return
        except OSError as exc:
            raise CacheError(f"cannot remove {path}: {exc.strerror}") from exc
        self._prune_dirs(path.parent)
        if last and self._on_last_link is not None:
            self._on_last_link(lfn)

    def _prune_dirs(self, directory: Path) -> None:
        while directory != self.data and self.data in directory.parents:
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent
