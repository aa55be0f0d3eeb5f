"""Where a job's input comes from: own cache, then a peer's cache, then the SE (Hasham 2011, IV.B;
Delgado Peris 2014, III.A).

"The real job will first look for its input files in the cache ... otherwise the real job will
contact the given SE" (Hasham 2011, II); Delgado Peris 2014 (III.A) adds the pilots of the same
site: the pilot fetches a replica found through the DHT and adds it to its cache, and "upon failure,
falls
back to the local SE".  :class:`Resolver` does exactly that, before the job starts:

1. own cache hit: the file's path (made most recently used);
2. each peer that holds a replica, in the order given: fetch, check size and adler32, add to
   the own cache; any failure or mismatch moves on;
3. the SE: the LFN's PFN by the Trivial File Catalog, read into the own cache, checked.

The expected size and adler32 come from the caller (the task's input list) or else from the
SE's metadata, so a corrupt or truncated replica on a peer is detected and replaced.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from glidein_ext.cache.checksum import FileMeta
from glidein_ext.cache.peer import Address, PeerClient
from glidein_ext.cache.se import StorageElement
from glidein_ext.cache.store import CacheStore
from glidein_ext.cache.tfc import Catalog
from glidein_ext.errors import CatalogError, TransferError

log = logging.getLogger(__name__)

PeerLocator = Callable[[str], Sequence[Address]]


class Source(Enum):
    CACHE = "cache"
    PEER = "peer"
    SE = "se"


@dataclass(frozen=True)
class Resolved:
    """A job input ready to read, and where it came from."""

    lfn: str
    path: Path
    source: Source
    failures: tuple[str, ...] = ()


def _no_peers(lfn: str) -> Sequence[Address]:
    del lfn
    return ()


@dataclass
class Resolver:
    """Own cache -> peers -> SE for one pilot."""

    store: CacheStore
    se: StorageElement
    catalog: Catalog | None = None
    protocols: Sequence[str] = ("direct",)
    destination: str = "any"
    peers: PeerLocator = _no_peers
    client: PeerClient | None = None

    def pfn(self, lfn: str) -> str:
        """The SE's name for ``lfn`` (TFC), or a path under the SE root when there is no TFC."""
        if self.catalog is None:
            return self.se.pfn_of(lfn)
        pfn = self.catalog.lfn_to_pfn(lfn, self.protocols, self.destination)
        if pfn is None:
            protocols = ",".join(self.protocols)
            raise CatalogError(f"no lfn-to-pfn rule of protocol {protocols} matches {lfn}")
        return pfn

    def resolve(self, lfn: str, expected: FileMeta | None = None) -> Resolved:
        """A local path holding a verified copy of ``lfn``; TransferError if the SE fails too."""
        hit = self.store.lookup(lfn)
        if hit is not None:
            return Resolved(lfn, hit, Source.CACHE)
        failures: list[str] = []
        pfn = self.pfn(lfn)
        if expected is None:
            expected = self.se.stat(pfn)
        if self.client is not None:
            for address in self.peers(lfn):
                try:
                    path = self.client.fetch(address, lfn, self.store, expected)
                except TransferError as exc:
                    log.info("peer fetch failed, trying the next source: %s", exc)
                    failures.append(str(exc))
                    continue
                return Resolved(lfn, path, Source.PEER, tuple(failures))
        with self.store.writer(lfn, expected.size) as out:
            got = self.se.get(pfn, out)
            expected.check(got.size, got.adler32, f"storage element: {pfn}")
        return Resolved(lfn, self.store.path_of(lfn), Source.SE, tuple(failures))
