"""The pilot's data cache (Hasham 2011 §IV.B-IV.D; Delgado Peris 2014 §III.A) wired from
glidein_ext.cache.

:class:`PilotCache` owns a :class:`CacheStore` (LRU within ``MaxSpace - MinThreshold``), a
:class:`HostShare` (the other pilots on this host, from the Task Queue's heartbeat answer; the
capacity grows to ``MaxSpace x num_pilots - MinThreshold``) and a :class:`Resolver` over the SE
(through the site's Trivial File Catalog when one is given; slowed and made to fail as Hasham 2011
Table I conditions say when asked).  An input comes from, in order (Delgado Peris 2014 §III.A):

1. the own cache;
2. a same-host pilot's cache, by hard link;
3. a pilot of the site that published it in the site DHT (``locate``), fetched from its peer file
   server and checked against the size and adler32 it published: on a mismatch or any failure,
   the next replica;
4. the SE.

Each input's origin (``cache``, ``host``, ``peer``, ``se``) is counted per task for the Task
Queue's hit ratios.  What the Task Queue believes is cached is mirrored here, so that evictions and
last-link deletions are reported (the ``cached`` list of a heartbeat, pre-DHT mode) only when the
cache really changed.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from glidein_ext.agent.locations import Location
from glidein_ext.agent.settings import AgentSettings
from glidein_ext.cache.checksum import FileMeta, meta_of_file
from glidein_ext.cache.hostshare import HostShare, PeerCache
from glidein_ext.cache.lru import cache_capacity
from glidein_ext.cache.peer import PeerClient
from glidein_ext.cache.resolve import Resolver, Source
from glidein_ext.cache.se import StorageElement
from glidein_ext.cache.store import CacheStore, data_file
from glidein_ext.cache.tfc import Catalog
from glidein_ext.errors import CacheError, CatalogError, TransferError
from glidein_ext.tq.client.limits import lfn_problem
from glidein_ext.tq.client.protocol import Neighbour

log = logging.getLogger("glidein_ext.agent")

_DEFAULTS = AgentSettings()

# A maker publishes its outputs in the site DHT while it reports its completion
# (``distributed.worker``),
# so a reader the master placed at once may look before the publication has landed: it looks
# again after these pauses (seconds) before reading the SE.  A file no pilot of the site holds
# (made at another site, or the workflow's own input) costs their sum.
LOCATE_AGAIN = (0.25,)

Locate = Callable[[str], Sequence[Location]]
"""The replicas of an LFN the site DHT knows (Delgado Peris 2014 §III.A)."""


class PilotCache:
    """One pilot's cache area: store, host sharing, resolver and the TQ's view of it."""

    def __init__(
        self,
        root: Path,
        *,
        max_space: int = _DEFAULTS.max_space_bytes,
        min_threshold: int = _DEFAULTS.min_threshold_bytes,
        se_dir: Path | None = None,
        se: StorageElement | None = None,
        catalog: Catalog | None = None,
        protocols: Sequence[str] = ("direct",),
    ) -> None:
        """``se`` (an SE with its delay and failures) replaces a plain one over ``se_dir``;
        ``catalog`` maps LFNs to the SE's PFNs (``protocols`` tried in order)."""
        self.root = root
        self.max_space = max_space
        self.min_threshold = min_threshold
        self.gone: list[str] = []  # files whose last link this pilot deleted (IV.D)
        self.pilot_id: int | None = None
        self.locate: Locate | None = None  # the site DHT's replicas (set when the pilot joins)
        self.peer_client: PeerClient | None = None
        self.peer_failures = 0  # peer copies refused (transfer failed, or a bad checksum)
        self._origins: Counter[str] = Counter()
        self._metas: dict[tuple[str, int, int], FileMeta] = {}
        self._lock = threading.Lock()
        self.store = CacheStore(
            root,
            cache_capacity(max_space, min_threshold, 1),
            on_last_link=self._last_link,
        )
        self.share = HostShare(self.store, "", max_space=max_space, min_threshold=min_threshold)
        if se is None and se_dir is not None:
            se = StorageElement(se_dir)
        self.resolver = (
            Resolver(self.store, se, catalog=catalog, protocols=tuple(protocols))
            if se is not None
            else None
        )
        self._reported: set[str] | None = None  # what the Task Queue holds for this pilot

    def _last_link(self, lfn: str) -> None:
        log.info("removed the last link of %s", lfn)
        with self._lock:
            self.gone.append(lfn)

    # -- contents ------------------------------------------------------------------------------

    def lfns(self) -> list[str]:
        """The cached files (complete ones only) with names the TQ accepts (``lfn_problem``: a
        file of another origin never makes the TQ refuse the pilot), least recently used first."""
        return [entry.lfn for entry in self.store.entries() if lfn_problem(entry.lfn) is None]

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
        self.pilot_id = pilot_id
        self.share.pilot_id = str(pilot_id)

    def use_site(self, locate: Locate, client: PeerClient) -> None:
        """Fetch from the site's pilots too (Delgado Peris 2014 §III.A): ``locate`` asks the site
        DHT."""
        self.locate = locate
        self.peer_client = client

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
        fetched = self._from_peers(lfn)
        if fetched is not None:
            return fetched, "peer"
        if self.resolver is None:
            raise TransferError(f"input {lfn} is in no cache of the site and there is no SE")
        try:
            got = self.resolver.resolve(lfn)
        except CatalogError as exc:
            raise TransferError(str(exc)) from exc
        return got.path, "cache" if got.source is Source.CACHE else "se"

    def _from_peers(self, lfn: str) -> Path | None:
        """A verified copy from a pilot that published ``lfn`` in the site DHT, or None."""
        if self.locate is None or self.peer_client is None:
            return None
        replicas = [r for r in self.locate(lfn) if r.pilot_id != self.pilot_id]
        for pause in LOCATE_AGAIN:
            if replicas:
                break
            time.sleep(pause)
            replicas = [r for r in self.locate(lfn) if r.pilot_id != self.pilot_id]
        random.shuffle(replicas)  # spread the readers of a popular file over its replicas
        for replica in replicas:
            try:
                return self.peer_client.fetch(replica.address, lfn, self.store, replica.meta)
            except (TransferError, CacheError) as exc:
                self.peer_failures += 1
                log.warning("peer copy of %s refused, trying the next source: %s", lfn, exc)
        return None

    def acquire(self, lfn: str) -> tuple[Path, str]:
        """Fetch ``lfn`` and pin it for a running task; :meth:`store` ``.unpin`` releases it.
        Its origin is counted for the task (:meth:`take_origins`)."""
        for _ in range(3):
            path, origin = self.fetch(lfn)
            try:
                self.store.pin(lfn)
            except CacheError:
                continue  # evicted between fetch and pin: fetch again
            with self._lock:
                self._origins[origin] += 1
            return path, origin
        raise CacheError(f"{lfn} keeps leaving the cache before it can be pinned")

    def take_origins(self) -> dict[str, int]:
        """Where the inputs acquired since the last call came from (one task's), by origin."""
        with self._lock:
            origins = dict(self._origins)
            self._origins.clear()
        return origins

    def metas(self) -> dict[str, FileMeta]:
        """Every cached file with its size and adler32 (what the pilot publishes in the DHT);
        a checksum is remembered per file version, so a file is read once."""
        found: dict[str, FileMeta] = {}
        for entry in self.store.entries():
            path = self.store.path_of(entry.lfn)
            try:
                st = path.stat()
            except OSError:
                continue  # evicted meanwhile
            key = (entry.lfn, st.st_ino, st.st_mtime_ns)
            meta = self._metas.get(key)
            if meta is None:
                try:
                    meta = meta_of_file(path)
                except TransferError as exc:
                    log.info("not publishing %s: %s", entry.lfn, exc)
                    continue
                self._metas[key] = meta
            found[entry.lfn] = meta
        if len(self._metas) > 2 * len(found) + 1024:  # forget evicted files' checksums
            self._metas = {k: m for k, m in self._metas.items() if found.get(k[0]) == m}
        return found

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
