"""A storage element for experiments: a directory with real file I/O, slowed and made to fail
like a loaded SE (Hasham 2011, section V, Table I).

The seed studies the cache under three SE conditions, each a *delay factor* (the delay a job
bears in accessing the SE, drawn from a Gaussian) and a *failure rate* (the probability that a
read or a write fails):

======  ============  ============  =================
name    delay factor  failure rate  load on the SE
======  ============  ============  =================
d1f1    0.01          0             low / normal
d2f2    0.15          0.03          moderate / medium
d3f3    0.50          0.1           high / worse
======  ============  ============  =================

Our precise reading (documented in docs/cache.md): every data transfer (get or put) first waits
``delay_factor * time_scale * max(0, N(1, 0.25))`` seconds, then fails with probability
``failure_rate`` (a TransferError, after the wait, as a timed-out read would), else copies the
file.  ``time_scale`` (seconds, default 1) stretches or shrinks the experiment.  The RNG is
seeded, so a run is reproducible.  Metadata (``stat``: size and adler32, as SEs record them) is
neither delayed nor failed.

PFNs are ``file://`` URLs or absolute paths inside the SE's root; anything outside is refused.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from glidein_ext.cache.checksum import FileMeta, adler32_bytes, meta_of_file
from glidein_ext.errors import ConfigError, TransferError

COPY_CHUNK = 4 * 1024 * 1024


@dataclass(frozen=True)
class SeCondition:
    """One row of the paper's Table I."""

    delay_factor: float
    failure_rate: float


# Hasham 2011 §V, Table I.
SE_CONDITIONS: dict[str, SeCondition] = {
    "d1f1": SeCondition(0.01, 0.0),
    "d2f2": SeCondition(0.15, 0.03),
    "d3f3": SeCondition(0.50, 0.1),
}


def condition(name: str) -> SeCondition:
    """The Table I condition called ``name`` (d1f1, d2f2, d3f3)."""
    try:
        return SE_CONDITIONS[name.lower()]
    except KeyError:
        known = ", ".join(SE_CONDITIONS)
        raise ConfigError(f"unknown SE condition {name!r}; known: {known}") from None


@dataclass
class SeStats:
    """What the SE did, for experiments and tests."""

    gets: int = 0
    puts: int = 0
    failures: int = 0
    delay_seconds: float = 0.0


class StorageElement:
    """A directory-backed SE with a delay factor and a failure rate; thread-safe."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        delay_factor: float = 0.0,
        failure_rate: float = 0.0,
        time_scale: float = 1.0,
        seed: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if delay_factor < 0 or time_scale < 0 or not 0.0 <= failure_rate <= 1.0:
            raise ConfigError(
                f"bad SE settings: delay_factor={delay_factor}, failure_rate={failure_rate}, "
                f"time_scale={time_scale}"
            )
        self.root = Path(root).resolve()
        self.delay_factor = delay_factor
        self.failure_rate = failure_rate
        self.time_scale = time_scale
        self.stats = SeStats()
        self._rng = random.Random(seed)
        self._sleep = sleep
        self._lock = threading.Lock()
        self._meta: dict[tuple[str, int, int, int], FileMeta] = {}
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the SE root {self.root}: {exc.strerror}") from exc

    @classmethod
    def with_condition(
        cls,
        root: str | os.PathLike[str],
        name: str,
        *,
        time_scale: float = 1.0,
        seed: int | None = None,
    ) -> StorageElement:
        """An SE under the Table I condition ``name`` (d1f1, d2f2, d3f3)."""
        cond = condition(name)
        return cls(
            root,
            delay_factor=cond.delay_factor,
            failure_rate=cond.failure_rate,
            time_scale=time_scale,
            seed=seed,
        )

    # -- names ---------------------------------------------------------------------------------

    def path_of(self, pfn: str) -> Path:
        """The file behind ``pfn``; TransferError if it lies outside the SE."""
        raw = pfn.removeprefix("file://")
        if not raw.startswith("/"):
            raise TransferError(f"not a PFN of this SE (absolute path or file:// URL): {pfn!r}")
        candidate = Path(os.path.normpath(raw))
        if candidate != self.root and self.root not in candidate.parents:
            raise TransferError(f"PFN {pfn!r} is outside the SE root {self.root}")
        return candidate

    def pfn_of(self, relative: str) -> str:
        """A ``file://`` PFN for ``relative`` under the root (for catalogs and tests)."""
        return "file://" + str(self.root / relative.lstrip("/"))

    # -- the paper's load model -----------------------------------------------------------------

    def _access(self, what: str) -> None:
        with self._lock:
            factor = max(0.0, self._rng.gauss(1.0, 0.25))
            fails = self._rng.random() < self.failure_rate
        delay = self.delay_factor * self.time_scale * factor
        if delay > 0:
            self._sleep(delay)
        with self._lock:
            self.stats.delay_seconds += delay
            if fails:
                self.stats.failures += 1
        if fails:
            rate = self.failure_rate
            raise TransferError(f"storage element: {what} failed (failure rate {rate})")

    # -- operations ----------------------------------------------------------------------------

    def stat(self, pfn: str) -> FileMeta:
        """Size and adler32 of the file (the SE's metadata; no delay, no failure)."""
        path = self.path_of(pfn)
        try:
            st = path.stat()
        except OSError as exc:
            raise TransferError(f"storage element: no file {pfn}: {exc.strerror}") from exc
        key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            known = self._meta.get(key)
        if known is None:
            known = meta_of_file(path)
            with self._lock:
                self._meta[key] = known
        return known

    def get(self, pfn: str, out: BinaryIO) -> FileMeta:
        """Copy the file into ``out``; returns the size and adler32 of what was written."""
        path = self.path_of(pfn)
        self._access(f"read of {pfn}")
        size, value = 0, 1
        try:
            with path.open("rb") as source:
                while chunk := source.read(COPY_CHUNK):
                    out.write(chunk)
                    size += len(chunk)
                    value = adler32_bytes(chunk, value)
        except OSError as exc:
            raise TransferError(f"storage element: cannot read {pfn}: {exc.strerror}") from exc
        with self._lock:
            self.stats.gets += 1
        return FileMeta(size, value)

    def put(self, src: str | os.PathLike[str], pfn: str) -> FileMeta:
        """Store a local file at ``pfn`` (atomic rename); returns its size and adler32."""
        path = self.path_of(pfn)
        self._access(f"write of {pfn}")
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.part")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, tmp)
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise TransferError(f"storage element: cannot write {pfn}: {exc.strerror}") from exc
        with self._lock:
            self.stats.puts += 1
        return self.stat(pfn)
