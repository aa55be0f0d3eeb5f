"""Cache-per-host (Hasham 2011, IV.D) on one real filesystem: hard links, survival, dead pilots."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from glidein_ext.cache.hostshare import HostRegistry, HostShare, PeerCache
from glidein_ext.cache.store import CacheStore

MAX_SPACE = 1000
MIN_THRESHOLD = 200


def _pilot(tmp_path: Path, name: str, reported: list[str]) -> CacheStore:
    return CacheStore(
        tmp_path / name, MAX_SPACE - MIN_THRESHOLD, on_last_link=reported.append, fsync=False
    )


def test_two_pilots_share_by_hard_link_and_a_file_outlives_its_first_owner(tmp_path: Path) -> None:
    reported: list[str] = []
    store_a = _pilot(tmp_path, "a", reported)
    store_b = _pilot(tmp_path, "b", reported)
    share_a = HostShare(store_a, "A", max_space=MAX_SPACE, min_threshold=MIN_THRESHOLD)
    share_b = HostShare(store_b, "B", max_space=MAX_SPACE, min_threshold=MIN_THRESHOLD)
    # the Task Queue's heartbeat answer: the other pilot on this host
    share_a.set_peers([PeerCache("B", store_b.root)])
    share_b.set_peers([PeerCache("A", store_a.root)])

    store_a.insert_bytes("/store/out/a1.root", b"A" * 300)
    result = share_b.poll()
    assert result.linked == ["/store/out/a1.root"]
    assert store_b.capacity == MAX_SPACE * 2 - MIN_THRESHOLD  # IV.D formula
    path_a = store_a.path_of("/store/out/a1.root")
    path_b = store_b.lookup("/store/out/a1.root")
    assert path_b is not None
    assert os.stat(path_a).st_ino == os.stat(path_b).st_ino
    assert os.stat(path_b).st_nlink == 2
    assert share_a.poll().linked == []  # a already has it; b's link is not "new"

    # A deletes its copy: the file lives on in B, and A reports nothing (not the last link)
    assert store_a.evict("/store/out/a1.root")
    assert reported == []
    assert path_b.read_bytes() == b"A" * 300 and os.stat(path_b).st_nlink == 1
    # and it is not linked back into A by A's next poll: A chose to evict it
    assert share_a.poll().linked == []

    # B removes the last link and reports it (to the Task Queue, in a pilot)
    assert store_b.evict("/store/out/a1.root")
    assert reported == ["/store/out/a1.root"]


def test_dead_pilot_directory_is_dropped_and_capacity_shrinks(tmp_path: Path) -> None:
    reported: list[str] = []
    store_a = _pilot(tmp_path, "a", reported)
    store_b = _pilot(tmp_path, "b", reported)
    share_b = HostShare(store_b, "B", max_space=MAX_SPACE, min_threshold=MIN_THRESHOLD)
    share_b.set_peers([PeerCache("A", store_a.root)])
    for i in range(4):
        store_a.insert_bytes(f"/store/f{i}", bytes([i]) * 200)
    assert len(share_b.poll().linked) == 4
    store_b.insert_bytes("/store/mine", b"m" * 200)
    assert store_b.used == 1000  # over the single-pilot capacity of 800

    shutil.rmtree(store_a.root)  # pilot A is gone, its directory with it
    result = share_b.poll()
    assert result.dropped == ["A"]
    assert share_b.peers == {}
    assert store_b.capacity == MAX_SPACE - MIN_THRESHOLD
    assert result.evicted == ["/store/f0"]  # LRU first, down to 800 bytes
    assert reported == ["/store/f0"]  # B held its last link
    assert store_b.used == 800


def test_host_registry_without_a_task_queue(tmp_path: Path) -> None:
    registry = HostRegistry(tmp_path / "registry")
    store_a = _pilot(tmp_path, "a", [])
    store_b = _pilot(tmp_path, "b", [])
    share_a = HostShare(
        store_a, "A", max_space=MAX_SPACE, min_threshold=MIN_THRESHOLD, registry=registry
    )
    share_b = HostShare(
        store_b, "B", max_space=MAX_SPACE, min_threshold=MIN_THRESHOLD, registry=registry
    )
    store_a.insert_bytes("/store/x", b"x")
    assert share_b.poll().linked == ["/store/x"]
    assert set(share_b.peers) == {"A"}

    # a pilot process that died without unregistering
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    registry.register("C", tmp_path / "c", pid=int(dead.stdout))
    assert [p.pilot_id for p in registry.peers()] == ["A", "B"]
    assert not (tmp_path / "registry" / "C.json").exists()

    assert share_a.leave() == ["/store/x"]
    share_b.poll()
    assert share_b.peers == {}
    assert (store_b.lookup("/store/x") or Path("/nonexistent")).read_bytes() == b"x"
