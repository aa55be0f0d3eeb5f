"""Where a simulated task's inputs come from and how long that takes: the pilots' caches (the
real ``cache.lru.LruIndex`` each, within ``cache_capacity``), same-host sharing by hard link
(Hasham 2011 §IV-D), the site DHT's replicas (Delgado Peris 2014 §III.A), and the SE with the
Hasham 2011 Table I delay and failure rate, pure (driven with a seeded ``random.Random``).

The fetch order is the pilot agent's (``agent.pilot_cache``): own cache, a same-host pilot's,
a peer of the site through the DHT (architectures with a DHT), the SE.  Every input fetched goes
into the pilot's cache, every output too (LRU evicts what no longer fits).
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Container
from dataclasses import dataclass, field

from glidein_ext.cache.lru import LruIndex, cache_capacity
from glidein_ext.errors import CacheFullError
from glidein_ext.sim.config import SimConfig


@dataclass
class PilotFiles:
    """One pilot's cache."""

    pilot_id: int
    site: int
    host: str
    index: LruIndex | None  # None: no cache (scheme ``none``)


@dataclass(frozen=True)
class Transfer:
    """The outcome of a stage-in or stage-out: seconds, inputs by origin, success."""

    seconds: float
    origins: dict[str, int] = field(default_factory=dict)
    ok: bool = True


class Caches:
    """Every pilot's cache, the hosts' sharing, the sites' DHT view, the SE."""

    def __init__(self, config: SimConfig, rng: random.Random) -> None:
        self.config = config
        self.rng = rng
        self.pilots: dict[int, PilotFiles] = {}
        self._hosts: defaultdict[str, set[int]] = defaultdict(set)
        self._holders: defaultdict[str, set[int]] = defaultdict(set)  # LFN -> pilots caching it
        self._site_files: defaultdict[int, Counter[str]] = defaultdict(Counter)
        self.se_operations = 0
        self.se_reads: Counter[str] = Counter()  # LFN -> stage-ins that read it from the SE

    # --- pilots ---

    def join(self, pilot_id: int, site: int, host: str) -> None:
        config = self.config
        index = None
        if config.cache.enabled:
            sharing = config.pilots_per_host if config.cache.per_host else 1
            capacity = cache_capacity(config.cache_max_space, config.cache_min_threshold, sharing)
            index = LruIndex(capacity)
        self.pilots[pilot_id] = PilotFiles(pilot_id, site, host, index)
        self._hosts[host].add(pilot_id)

    def leave(self, pilot_id: int) -> None:
        pilot = self.pilots.pop(pilot_id, None)
        if pilot is None:
            return
        self._hosts[pilot.host].discard(pilot_id)
        if pilot.index is not None:
            for lfn, _ in pilot.index.lru_order():
                self._drop(pilot, lfn)

    def _drop(self, pilot: PilotFiles, lfn: str) -> None:
        self._holders[lfn].discard(pilot.pilot_id)
        files = self._site_files[pilot.site]
        files[lfn] -= 1
        if files[lfn] <= 0:
            del files[lfn]

    def cached(self, pilot_id: int) -> set[str]:
        index = self.pilots[pilot_id].index
        return set() if index is None else {lfn for lfn, _ in index.lru_order()}

    def site_files(self, site: int) -> Container[str]:
        """Every file some pilot of ``site`` caches (what the site DHT knows)."""
        return self._site_files[site]

    def holders(self, lfn: str) -> set[int]:
        return set(self._holders.get(lfn, ()))

    def _admit(self, pilot: PilotFiles, lfn: str) -> None:
        if pilot.index is None:
            return
        try:
            evicted = pilot.index.admit(lfn, self.config.file_size)
        except CacheFullError:
            return  # pinned files fill the cache: the file is read, not kept
        for old in evicted:
            self._drop(pilot, old)
        if pilot.pilot_id not in self._holders[lfn]:
            self._holders[lfn].add(pilot.pilot_id)
            self._site_files[pilot.site][lfn] += 1

    def link_host(self, pilot_id: int) -> int:
        """Cache-per-host (Hasham 2011 §IV-D): hard-link the files of this host's other pilots into
        this pilot's cache (what each heartbeat does); how many were new."""
        pilot = self.pilots[pilot_id]
        if pilot.index is None or not self.config.cache.per_host:
            return 0
        mine = self.cached(pilot_id)
        new = set()
        for other in self._hosts[pilot.host] - {pilot_id}:
            new |= self.cached(other) - mine
        for lfn in sorted(new):
            self._admit(pilot, lfn)
        return len(new)

    # --- transfers ---

    def _se_access(self) -> tuple[float, bool]:
        storage = self.config.storage
        self.se_operations += 1
        wait = storage.delay_factor * storage.time_scale * max(0.0, self.rng.gauss(1.0, 0.25))
        seconds = wait + self.config.file_size / storage.bandwidth
        return seconds, self.rng.random() >= storage.failure_rate

    def _dht_lookup(self, site_pilots: int) -> float:
        hops = max(1, math.ceil(math.log2(max(site_pilots, 2))))
        return 2 * hops * self.config.network.lan_latency

    def stage_in(self, pilot_id: int, inputs: tuple[str, ...], dht: bool) -> Transfer:
        """Fetch every input (own cache, host, peer, SE); a failed SE read fails the attempt."""
        config, network = self.config, self.config.network
        pilot = self.pilots[pilot_id]
        origins: dict[str, int] = {}
        seconds = 0.0
        size = config.file_size
        for lfn in inputs:
            holders = self._holders.get(lfn, set())
            if pilot.index is not None and pilot.index.touch(lfn):
                origin, took = "cache", size / network.disk_bandwidth
            elif config.cache.per_host and holders & self._hosts[pilot.host]:
                origin, took = "host", size / network.disk_bandwidth
            elif dht and any(self.pilots[p].site == pilot.site for p in holders):
                site_size = sum(1 for p in self.pilots.values() if p.site == pilot.site)
                origin = "peer"
                took = self._dht_lookup(site_size) + size / network.peer_bandwidth
            else:
                origin = "se"
                self.se_reads[lfn] += 1
                took, ok = self._se_access()
                if not ok:
                    return Transfer(seconds + took, origins, False)
            seconds += took
            origins[origin] = origins.get(origin, 0) + 1
            if origin != "cache":
                self._admit(pilot, lfn)
        return Transfer(seconds, origins)

    def stage_out(self, pilot_id: int, outputs: tuple[str, ...]) -> Transfer:
        """Outputs into the cache and onto the SE; a failed SE write fails the attempt (and its
        outputs are dropped)."""
        pilot = self.pilots[pilot_id]
        seconds = 0.0
        for _ in outputs:
            took, ok = self._se_access()
            seconds += took
            if not ok:
                return Transfer(seconds, ok=False)
        for lfn in outputs:
            self._admit(pilot, lfn)
        return Transfer(seconds)
