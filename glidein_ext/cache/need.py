"""How much of a pilot's cache the tasks still to run will read (pure).

Vacating a pilot loses its cache: every cached file that a task still to run reads must then come
from the storage element again (Hasham 2011 §IV-E: the cache is what the cache-aware matching
placed tasks for).  Whoever knows the tasks still to run computes it: the Task Queue (every
queued task and every task still waiting for an input, and each pilot's cache list) or a pilot
of a distributed site (its cache and the TaskList it heard, Delgado Peris 2014 §III.C).  The pilot
publishes the number in ``.pilot.ad`` as ``CACHED_INPUT_NEEDED_MB`` and the site's victim choice
(``site.victims``, policy ``cache``) vacates the pilots that hold the least of it first.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Container, Iterable, Mapping

MB = 1_000_000


def needed_bytes(cached: Mapping[str, int], pending_inputs: Iterable[Iterable[str]]) -> int:
    """Bytes of the ``cached`` files (LFN -> size in bytes) that at least one of the pending
    tasks (each given by its input LFNs) reads; a file read by several counts once."""
    needed: set[str] = set()
    for inputs in pending_inputs:
        needed.update(lfn for lfn in inputs if lfn in cached)
    return sum(max(cached[lfn], 0) for lfn in needed)


def to_mb(size: int) -> int:
    """Bytes as whole MB (10^6), rounded up: a needed file of 1 byte still counts."""
    return -(-max(size, 0) // MB)


def needed_mb(cached: Mapping[str, int], pending_inputs: Iterable[Iterable[str]]) -> int:
    """``needed_bytes`` in MB, the value of ``CACHED_INPUT_NEEDED_MB``."""
    return to_mb(needed_bytes(cached, pending_inputs))


def needed_mb_of_inputs(cached: Container[str], inputs: Iterable[tuple[str, int]]) -> int:
    """The same from what a distributed site's pilot has at hand: the LFNs it caches and the
    (LFN, size) inputs of the TaskList's tasks (``sched.ranking.InputFile`` carries both)."""
    sizes = {lfn: size for lfn, size in inputs if lfn in cached}
    return to_mb(sum(max(size, 0) for size in sizes.values()))


def needed_files(cached: Container[str], inputs: Iterable[tuple[str, int]]) -> dict[str, int]:
    """The ``cached`` files among ``inputs`` (LFN, size in bytes): LFN -> size, each once.
    What one pilot knows; a glidein's lanes share its disk, so it sums the union of theirs.
    The roles may be swapped: the wanted LFNs as ``cached`` and the cache's (LFN, size) as
    ``inputs`` (the live TaskList carries no sizes; the pilot's cache does)."""
    return {lfn: max(size, 0) for lfn, size in inputs if lfn in cached}


def union_mb(parts: Iterable[Mapping[str, int]]) -> int:
    """MB of the union of several ``needed_files`` answers (a file known to several counts once)."""
    union: dict[str, int] = {}
    for part in parts:
        union.update(part)
    return to_mb(sum(union.values()))


class NeededFiles:
    """One pilot's latest word on its needed cached files (``needed_files``) and when it learnt
    it (``time.time()``): written by the pilot's side that hears the tasks still to run (the
    Task Queue's heartbeat answer, or the TaskList), read by whoever publishes the number (a
    glidein's agent).  ``every``: how often a caller that has to work for it (``due``) should."""

    def __init__(self, every: float = 10.0) -> None:
        self.every = every
        self._lock = threading.Lock()
        self._files: dict[str, int] | None = None
        self._at = 0.0
        self._asked = -math.inf  # monotonic time ``due`` last said yes

    def due(self, monotonic_now: float) -> bool:
        """Whether to work out the value again now (at most once per ``every`` seconds)."""
        with self._lock:
            if monotonic_now - self._asked < self.every:
                return False
            self._asked = monotonic_now
            return True

    def learn(self, files: Mapping[str, int], now: float) -> None:
        with self._lock:
            self._files, self._at = dict(files), now

    def latest(self) -> tuple[dict[str, int], float] | None:
        """(LFN -> size, when learnt), or None if never."""
        with self._lock:
            return None if self._files is None else (dict(self._files), self._at)
