"""The pilot agent's word on its cache, handed to the `.pilot.ad` refresh: how many MB of its cached
inputs the tasks still to run will read (``cache.need``), for ``CACHED_INPUT_NEEDED_MB``.

Each of the glidein's lanes learns which of its cached files tasks still to run read (from the
Task Queue's heartbeat answer, or from its cache and the TaskList it heard); the glidein's agent
sums the union of its lanes' words (:func:`glidein_need`: their caches are one disk) and, paced by
:class:`CacheNeedPublisher`, writes it with :func:`write_cache_need` into
``START_DIR/.glidein-ext/cache-need.ad`` (a one-key ad file, atomically, its mtime the time the
value was computed for); every refresh reads it with the safe reader (:func:`read_cache_need`).
A missing, unreadable or stale file (older than ``max_age`` seconds: the agent stopped telling)
means "unknown", and the attribute is left out of `.pilot.ad`, so the site does not mistake a
silent pilot for one whose cache nobody needs.

Python 3.9, standard library only: the startd cron imports it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from glidein_ext.adfile import Kind, Schema, read_ad_with_stat, write_ad
from glidein_ext.cache.need import union_mb
from glidein_ext.errors import AdFileError, AdFileMissing
from glidein_ext.glidein.pilotad import CACHED_INPUT_NEEDED_MB

CACHE_NEED_FILE = os.path.join(".glidein-ext", "cache-need.ad")
CACHE_NEED_SCHEMA = Schema("cache-need.ad", {CACHED_INPUT_NEEDED_MB: Kind.INT})
DEFAULT_MAX_AGE = 900  # seconds: a few of the agent's heartbeats
PUBLISH_EVERY = 30.0  # seconds: the agent writes the file at most this often
REWRITE_AFTER = 300.0  # seconds: an unchanged value is written again (well within DEFAULT_MAX_AGE)
LANE_MAX_AGE = 600.0  # seconds: a lane's word older than this is no word (the lane went silent)


def cache_need_path(start_dir: str) -> str:
    return os.path.join(start_dir, CACHE_NEED_FILE)


def write_cache_need(start_dir: str, megabytes: int, now: int) -> None:
    """The agent's side: record the value computed at ``now`` (AdFileError if it cannot)."""
    path = cache_need_path(start_dir)
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    except OSError as exc:
        raise AdFileError(os.path.dirname(path), f"cannot create: {exc.strerror}") from None
    write_ad(path, {CACHED_INPUT_NEEDED_MB: max(megabytes, 0)}, CACHE_NEED_SCHEMA, mtime=now)


def read_cache_need(
    start_dir: str, now: int, max_age: int = DEFAULT_MAX_AGE
) -> tuple[int | None, str]:
    """The refresh's side: (the value, or None when unknown; why it is unknown, or "")."""
    path = cache_need_path(start_dir)
    try:
        values, st = read_ad_with_stat(path, CACHE_NEED_SCHEMA)
    except AdFileMissing:
        return None, ""
    except AdFileError as exc:
        return None, str(exc)
    value = values.get(CACHED_INPUT_NEEDED_MB)
    if not isinstance(value, int) or isinstance(value, bool):
        return None, f"{path}: no {CACHED_INPUT_NEEDED_MB}"
    if now - int(st.st_mtime) > max_age:
        return None, ""  # stale: the agent stopped telling; not an error
    return max(value, 0), ""


def glidein_need(
    words: Iterable[tuple[Mapping[str, int], float] | None],
    now: float,
    max_age: float = LANE_MAX_AGE,
) -> int | None:
    """A glidein's value from its lanes' words (each: the needed cached files, LFN -> bytes, and
    when it was learnt; None: the lane knows nothing yet).  The lanes' caches are one disk (hard
    links), so the files are counted once over their union; lanes not heard from for ``max_age``
    seconds are left out; None when no lane knows (the value is unknown, not 0)."""
    fresh = [files for files, at in (w for w in words if w is not None) if now - at <= max_age]
    if not fresh:
        return None
    return union_mb(fresh)


class CacheNeedPublisher:
    """When the glidein's agent writes the value (pure, but for :meth:`publish`): at most once
    per ``every`` seconds, and then only when it changed or ``rewrite_after`` seconds passed
    (the refresh takes a file older than ``DEFAULT_MAX_AGE`` for silence)."""

    def __init__(
        self, start_dir: str, every: float = PUBLISH_EVERY, rewrite_after: float = REWRITE_AFTER
    ) -> None:
        self.start_dir = start_dir
        self.every = every
        self.rewrite_after = rewrite_after
        self.written: int | None = None  # the value last written
        self._written_at = -float("inf")
        self._looked_at = -float("inf")
        self.writes = 0

    def due(self, now: float) -> bool:
        """Whether to work the value out now (at most once per ``every``)."""
        return now - self._looked_at >= self.every

    def decide(self, value: int | None, now: float) -> bool:
        """Whether ``value`` (None: unknown, never written) is to be written at ``now``."""
        self._looked_at = now
        if value is None:
            return False
        return value != self.written or now - self._written_at >= self.rewrite_after

    def publish(
        self, words: Iterable[tuple[Mapping[str, int], float] | None], now: float
    ) -> int | None:
        """Work the value out from the lanes' words and write it if :meth:`decide` says so; the
        value written, or None (AdFileError if it cannot be written)."""
        if not self.due(now):
            return None
        value = glidein_need(words, now)
        if not self.decide(value, now):
            return None
        assert value is not None
        write_cache_need(self.start_dir, value, int(now))
        self.written, self._written_at = value, now
        self.writes += 1
        return value
