"""The pilot's data cache (seed 001 IV.B-IV.D) wired from glidein_ext.cache.

:class:`PilotCache` owns a :class:`CacheStore` (LRU within ``MaxSpace - MinThreshold``), a
:class:`HostShare` (the other pilots on this host, from the Task Queue's heartbeat answer; the
capacity grows to ``MaxSpace x num_pilots - MinThreshold``) and a :class:`Resolver` over the SE
directory.  An input comes from the own cache, else by hard link from a same-host pilot's cache,
else from the SE.  What the Task Queue believes is cached is mirrored here, so that evictions and
last-link deletions are reported (the ``cached`` list of a heartbeat, pre-DHT mode) only when the
cache really changed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from pathlib import Path

from glidein_ext.agent.settings import AgentSettings
from glidein_ext.cache.hostshare import HostShare, PeerCache
from glidein_ext.cache.layout import data_file
from glidein_ext.cache.lru import cache_capacity
from glidein_ext.cache.resolve import Resolver, Source
from glidein_ext.cache.se import StorageElement
from glidein_ext.cache.store import CacheStore
from glidein_ext.errors import CacheError, CatalogError, TransferError
from glidein_ext.tq.protocol import Neighbour

log = logging.getLogger("glidein_ext.agent")

_DEFAULTS = AgentSettings()


class PilotCache:
    """One pilot's cache area: store, host sharing, resolver and the TQ's view of it."""

    def __init__(
        self,
        root: Path,
        *,
        max_space: int = _DEFAULTS.max_space_bytes,
        min_threshold: int = _DEFAULTS.min_threshold_bytes,
        se_dir: Path | None = None,
    ) -> None:
        self.root = root
        self.max_space = max_space
        self.min_threshold = min_threshold
        self.gone: list[str] = []  # files whose last link this pilot deleted (IV.D)
        self._lock = threading.Lock()
        self.store = CacheStore(
            root,
            cache_capacity(max_space, min_threshold, 1),
            on_last_link=self._last_link,
        )
        self.share = HostShare(self.store, "", max_space=max_space, min_threshold=min_threshold)
        self.resolver = Resolver(self.store, StorageElement(se_dir)) if se_dir is not None else None
        self._reported: set[str] | None = None  # what the Task Queue holds for this pilot

    def _last_link(self, lfn: str) -> None:
        log.info("removed the last link of %s", lfn)
        with self._lock:
            self.gone.append(lfn)

    # -- contents ------------------------------------------------------------------------------

    def lfns(self) -> list[str]:
        """The cached files (complete ones only), least recently used first."""
        return [entry.lfn for entry in self.store.entries()]

    def mark_reported(self, lfns: Iterable[str]) -> None:
        """The Task Queue now holds ``lfns`` for this pilot."""
        with self._lock:
            self._reported = set(lfns)

    def forget_reported(self) -> None:
        """The Task Queue's list changed on its side (a task's outputs): report in full next."""
        with self._lock:
            self._reported = None

    def changes(self) -> list[str] | None:
        """The cache list to report if it differs from what the Task Queue holds, else None."""
        now = self.lfns()
        with self._lock:
            if self._reported is not None and set(now) == self._reported:
                return None
        return now

    # -- host sharing (IV.D) -------------------------------------------------------------------

    def set_pilot_id(self, pilot_id: int) -> None:
        self.share.pilot_id = str(pilot_id)

    def set_others(self, others: Iterable[Neighbour]) -> None:
        """The Task Queue's ``others`` (pilots on this host); capacity follows their number."""
        peers = [
            PeerCache(str(o.pilot_id), Path(o.cache_dir))
            for o in others
            if o.cache_dir and Path(o.cache_dir) != self.root
        ]
        self.share.set_peers(peers)

    def poll_host(self) -> None:
        """Drop dead neighbours, resize, link the neighbours' new files (IV.D)."""
        try:
            result = self.share.poll()
        except CacheError as exc:
            log.warning("polling the host's caches failed: %s", exc)
            return
        if result.linked or result.evicted or result.dropped:
            log.info(
                "host caches: linked %d, evicted %d, dropped pilots %s",
                len(result.linked),
                len(result.evicted),
                result.dropped,
            )

    # -- stage-in / stage-out ------------------------------------------------------------------

    def fetch(self, lfn: str) -> tuple[Path, str]:
        """Make ``lfn`` present in the own cache; where it came from: cache, host or se."""
        hit = self.store.lookup(lfn)
        if hit is not None:
            return hit, "cache"
        for peer in self.share.peers.values():
            candidate = data_file(peer.cache_dir, lfn)
            if not candidate.is_file():
                continue
            try:
                return self.store.link_file(lfn, candidate), "host"
            except CacheError as exc:
                log.info("cannot link %s from pilot %s: %s", lfn, peer.pilot_id, exc)
        if self.resolver is None:
            raise TransferError(f"input {lfn} is in no cache on this host and there is no SE")
        try:
            got = self.resolver.resolve(lfn)
        except CatalogError as exc:
            raise TransferError(str(exc)) from exc
        return got.path, "cache" if got.source is Source.CACHE else "se"

    def acquire(self, lfn: str) -> tuple[Path, str]:
        """Fetch ``lfn`` and pin it for a running task; :meth:`store` ``.unpin`` releases it."""
        for _ in range(3):
            path, origin = self.fetch(lfn)
            try:
                self.store.pin(lfn)
            except CacheError:
                continue  # evicted between fetch and pin: fetch again
            return path, origin
        raise CacheError(f"{lfn} keeps leaving the cache before it can be pinned")

    def keep_output(self, produced: Path, lfn: str) -> Path:
        """Put a task's output into the cache (IV.C, by hard link: no copy); its cache path."""
        try:
            path = self.store.link_file(lfn, produced)
        except CacheError:
            path = self.store.insert_file(lfn, produced)  # another filesystem: copy
        produced.unlink()
        return path

    def put_se(self, source: Path, lfn: str) -> None:
        """Copy a file to the SE (stage-out); nothing without an SE."""
        if self.resolver is not None:
            self.resolver.se.put(source, self.resolver.pfn(lfn))
