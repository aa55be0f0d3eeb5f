"""Real HTTP on 127.0.0.1: peer transfers with checksum, Range, auth, limits, SE fallback."""

from __future__ import annotations

import http.client
import os
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from glidein_ext.cache import peerauth
from glidein_ext.cache.checksum import FileMeta, meta_of_file
from glidein_ext.cache.peer import PeerClient, PeerServer, url_path
from glidein_ext.cache.resolve import Resolver, Source
from glidein_ext.cache.se import StorageElement
from glidein_ext.cache.store import CacheStore
from glidein_ext.errors import TransferError

KEY = b"site-key-0123456789abcdef"
MB = 1024 * 1024


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[tuple[CacheStore, PeerServer]]:
    store = CacheStore(tmp_path / "peer", 400 * MB, fsync=False)
    with PeerServer(store, KEY, max_transfers=2) as server:
        yield store, server


def test_100_mb_peer_transfer_with_checksum(
    tmp_path: Path, serving: tuple[CacheStore, PeerServer]
) -> None:
    peer_store, server = serving
    data = os.urandom(100 * MB)
    peer_store.insert_bytes("/store/big/file.root", data)
    expected = FileMeta(len(data), zlib.adler32(data))
    mine = CacheStore(tmp_path / "mine", 400 * MB, fsync=False)
    path = PeerClient(KEY).fetch(server.address, "/store/big/file.root", mine, expected)
    assert path == mine.lookup("/store/big/file.root")
    assert meta_of_file(path) == expected
    # without an expected value the server's Digest is used
    other = CacheStore(tmp_path / "other", 400 * MB, fsync=False)
    got = PeerClient(KEY).fetch(server.address, "/store/big/file.root", other)
    assert meta_of_file(got) == expected
    server.stop()  # joins the handler threads (block_on_close): their counts are final
    assert server.bytes_sent == 2 * len(data)


def test_range_requests(serving: tuple[CacheStore, PeerServer]) -> None:
    store, server = serving
    store.insert_bytes("/store/r", bytes(range(256)) * 4)
    client = PeerClient(KEY)
    assert client.fetch_range(server.address, "/store/r", 10, 19) == bytes(range(10, 20))
    assert client.fetch_range(server.address, "/store/r", 1020, 5000) == bytes(range(252, 256))


def _raw_get(server: PeerServer, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    conn = http.client.HTTPConnection(*server.address, timeout=10)
    try:
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status, dict(resp.getheaders())
    finally:
        conn.close()


def test_unauthenticated_and_wrong_site_requests_are_refused(
    tmp_path: Path, serving: tuple[CacheStore, PeerServer]
) -> None:
    store, server = serving
    store.insert_bytes("/store/s", b"secret")
    status, headers = _raw_get(server, url_path("/store/s"), {})
    assert status == 401 and headers["WWW-Authenticate"] == peerauth.SCHEME
    mine = CacheStore(tmp_path / "mine", MB, fsync=False)
    with pytest.raises(TransferError, match="HTTP 401"):
        PeerClient(b"another-site-key-000000").fetch(server.address, "/store/s", mine)
    assert "/store/s" not in mine


def test_missing_file_is_404(tmp_path: Path, serving: tuple[CacheStore, PeerServer]) -> None:
    _, server = serving
    mine = CacheStore(tmp_path / "mine", MB, fsync=False)
    with pytest.raises(TransferError, match="HTTP 404"):
        PeerClient(KEY).fetch(server.address, "/store/none", mine)


def test_concurrent_transfers_are_limited(serving: tuple[CacheStore, PeerServer]) -> None:
    store, server = serving
    store.insert_bytes("/store/c", b"x" * 1000)
    # hold both slots, as two long transfers would
    assert server.slots.acquire(blocking=False) and server.slots.acquire(blocking=False)
    try:
        path = url_path("/store/c")
        auth = peerauth.authorization(KEY, "GET", path, server.clock())
        status, headers = _raw_get(server, path, {"Authorization": auth})
        assert status == 503 and headers["Retry-After"] == "1"
    finally:
        server.slots.release()
        server.slots.release()
    status, _ = _raw_get(server, path, {"Authorization": auth})
    assert status == 200


def test_parallel_fetches_all_complete(
    tmp_path: Path, serving: tuple[CacheStore, PeerServer]
) -> None:
    store, server = serving
    blobs = {f"/store/p/{i}": os.urandom(256 * 1024 + i) for i in range(6)}
    for lfn, blob in blobs.items():
        store.insert_bytes(lfn, blob)
    mine = CacheStore(tmp_path / "mine", 100 * MB, fsync=False)
    client = PeerClient(KEY)
    errors: list[BaseException] = []

    def fetch(lfn: str) -> None:
        for _ in range(50):  # 503 when the two slots are busy: try again
            try:
                client.fetch(
                    server.address, lfn, mine, FileMeta(len(blobs[lfn]), zlib.adler32(blobs[lfn]))
                )
                return
            except TransferError as exc:
                if "503" not in str(exc):
                    errors.append(exc)
                    return
        errors.append(RuntimeError(f"{lfn}: always busy"))

    threads = [threading.Thread(target=fetch, args=(lfn,)) for lfn in blobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for lfn, blob in blobs.items():
        path = mine.lookup(lfn)
        assert path is not None and path.read_bytes() == blob


def _setup_se(tmp_path: Path, lfn: str, data: bytes) -> StorageElement:
    se = StorageElement(tmp_path / "se", seed=1)
    src = tmp_path / "src"
    src.write_bytes(data)
    se.put(src, se.pfn_of(lfn))
    return se


@pytest.mark.parametrize("damage", ["corrupt", "truncated"])
def test_bad_peer_copy_is_detected_and_replaced_from_the_se(
    tmp_path: Path, serving: tuple[CacheStore, PeerServer], damage: str
) -> None:
    peer_store, server = serving
    lfn = "/store/data/run/f.root"
    good = os.urandom(3 * MB)
    se = _setup_se(tmp_path, lfn, good)
    bad = bytearray(good)
    if damage == "corrupt":
        bad[MB] ^= 0xFF
    else:
        del bad[2 * MB :]
    peer_store.insert_bytes(lfn, bytes(bad))
    mine = CacheStore(tmp_path / "mine", 100 * MB, fsync=False)
    resolver = Resolver(mine, se, peers=lambda _lfn: [server.address], client=PeerClient(KEY))
    resolved = resolver.resolve(lfn)
    assert resolved.source is Source.SE
    assert len(resolved.failures) == 1
    assert ("adler32" if damage == "corrupt" else "size") in resolved.failures[0]
    assert resolved.path.read_bytes() == good
    assert resolver.resolve(lfn).source is Source.CACHE  # the next read is a cache hit


def test_resolver_prefers_a_good_peer_over_the_se(
    tmp_path: Path, serving: tuple[CacheStore, PeerServer]
) -> None:
    peer_store, server = serving
    lfn = "/store/data/g.root"
    data = os.urandom(MB)
    se = StorageElement(_setup_se(tmp_path, lfn, data).root, failure_rate=1.0)  # fails reads
    peer_store.insert_bytes(lfn, data)
    mine = CacheStore(tmp_path / "mine", 10 * MB, fsync=False)
    dead_peer = ("127.0.0.1", 9)  # discard port: nothing listens
    resolver = Resolver(
        mine, se, peers=lambda _l: [dead_peer, server.address], client=PeerClient(KEY, timeout=5)
    )
    resolved = resolver.resolve(lfn)
    assert resolved.source is Source.PEER and resolved.path.read_bytes() == data
    assert len(resolved.failures) == 1 and se.stats.gets == 0


def test_se_failure_fails_the_read_and_leaves_no_file(tmp_path: Path) -> None:
    lfn = "/store/data/x.root"
    se = _setup_se(tmp_path, lfn, b"payload")
    failing = StorageElement(se.root, failure_rate=1.0, seed=2)
    mine = CacheStore(tmp_path / "mine", MB, fsync=False)
    with pytest.raises(TransferError, match="failed"):
        Resolver(mine, failing).resolve(lfn)
    assert mine.lookup(lfn) is None and mine.used == 0
    assert Resolver(mine, se).resolve(lfn).path.read_bytes() == b"payload"
