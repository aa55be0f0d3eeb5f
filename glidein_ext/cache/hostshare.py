"""Cache-per-host: pilots on one worker node share their caches by hard links (Hasham 2011, IV.D).

"The TaskQueue sends back the list of other available pilot jobs on that WN and their cache
locations ... The pilot job will then save this list and poll the given locations for new cache
files.  A Unix hard link to a newly found file is created into the pilot's own cache area and the
file is placed into the cache by using the LRU algorithm."  The capacity becomes
``Max_Space x num_pilotjobs - Min_Threshold``; "if that location is not accessible, then the pilot
job removes that entry from its list and that particular pilot job is assumed to be dead".

The list of peers comes from the Task Queue's heartbeat answer (:meth:`HostShare.set_peers`) or,
without a Task Queue, from a host-local registry directory (:class:`HostRegistry`) in which each
pilot keeps a small JSON file naming its cache directory and pid.  Peers must be on the same
filesystem (hard links); a peer file that cannot be linked (EXDEV, permissions) is skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from glidein_ext.adfile import write_text_atomic
from glidein_ext.cache.lru import cache_capacity
from glidein_ext.cache.store import DATA_DIR, CacheStore, data_file, scan_cache
from glidein_ext.errors import AdFileError, CacheError
from glidein_ext.procs import pid_alive

MAX_ENTRY_BYTES = 4096


@dataclass(frozen=True)
class PeerCache:
    """Another pilot on this host and its cache root."""

    pilot_id: str
    cache_dir: Path
    pid: int | None = None


class HostRegistry:
    """A host-local directory where the pilots of this host announce their caches."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _entry(self, pilot_id: str) -> Path:
        if not pilot_id or "/" in pilot_id or pilot_id.startswith("."):
            raise CacheError(f"bad pilot id for the host registry: {pilot_id!r}")
        return self.directory / f"{pilot_id}.json"

    def register(self, pilot_id: str, cache_dir: Path, pid: int | None = None) -> None:
        text = json.dumps(
            {
                "pilot_id": pilot_id,
                "cache_dir": str(Path(cache_dir).resolve()),
                "pid": os.getpid() if pid is None else pid,
                "host": socket.gethostname(),
            }
        )
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_text_atomic(str(self._entry(pilot_id)), text + "\n")
        except (OSError, AdFileError) as exc:
            raise CacheError(f"cannot register in {self.directory}: {exc}") from exc

    def unregister(self, pilot_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._entry(pilot_id).unlink()

    def peers(self, exclude: str | None = None) -> list[PeerCache]:
        """Live registered pilots; entries of dead pids are removed (IV.D: dead pilots)."""
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise CacheError(f"cannot list the host registry {self.directory}: {exc}") from exc
        found: list[PeerCache] = []
        for name in names:
            if not name.endswith(".json") or name.startswith("."):
                continue
            path = self.directory / name
            try:
                with path.open("rb") as handle:
                    doc = json.loads(handle.read(MAX_ENTRY_BYTES))
                peer = PeerCache(str(doc["pilot_id"]), Path(doc["cache_dir"]), int(doc["pid"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if peer.pid is not None and not pid_alive(peer.pid):
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            if peer.pilot_id != exclude:
                found.append(peer)
        return found


@dataclass
class PollResult:
    linked: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)


@dataclass(eq=False)
class HostShare:
    """One pilot's view of the other pilots' caches on its host."""

    store: CacheStore
    pilot_id: str
    max_space: int
    min_threshold: int
    registry: HostRegistry | None = None
    _peers: dict[str, PeerCache] = field(init=False, default_factory=dict)
    # per peer: files already considered once
    _seen: dict[str, set[str]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        if self.registry is not None:
            self.registry.register(self.pilot_id, self.store.root)

    @property
    def peers(self) -> Mapping[str, PeerCache]:
        return dict(self._peers)

    def capacity(self) -> int:
        """``Max_Space x num_pilotjobs - Min_Threshold`` with this pilot counted (IV.D)."""
        return cache_capacity(self.max_space, self.min_threshold, 1 + len(self._peers))

    def set_peers(self, peers: Iterable[PeerCache]) -> None:
        """The Task Queue's heartbeat answer: the other pilots on this host (IV.D)."""
        self._peers = {p.pilot_id: p for p in peers if p.pilot_id != self.pilot_id}

    def poll(self) -> PollResult:
        """Refresh the peers (registry), drop dead ones, link new files, resize the cache."""
        result = PollResult()
        if self.registry is not None:
            self.set_peers(self.registry.peers(exclude=self.pilot_id))
        for pilot_id, peer in list(self._peers.items()):
            if not (peer.cache_dir / DATA_DIR).is_dir():  # IV.D: not accessible -> dead
                del self._peers[pilot_id]
                self._seen.pop(pilot_id, None)
                result.dropped.append(pilot_id)
        result.evicted = self.store.set_capacity(self.capacity())
        for peer in self._peers.values():
            try:
                entries = scan_cache(peer.cache_dir)
            except CacheError:
                continue  # vanished while we looked; the next poll drops it
            seen = self._seen.setdefault(peer.pilot_id, set())
            for entry in entries:  # oldest first, so linked files keep the peer's LRU order
                if entry.lfn in seen:
                    continue  # only new files (IV.D); one we evicted is not linked again
                seen.add(entry.lfn)
                if entry.lfn in self.store:
                    continue
                try:
                    self.store.link_file(entry.lfn, data_file(peer.cache_dir, entry.lfn))
                except CacheError:
                    continue  # evicted by its owner meanwhile, or does not fit now
                result.linked.append(entry.lfn)
            seen.intersection_update(e.lfn for e in entries)
        return result

    def leave(self) -> list[str]:
        """This pilot exits: unregister and remove its links (last links are reported)."""
        if self.registry is not None:
            self.registry.unregister(self.pilot_id)
        return self.store.clear()
