"""Real sockets on 127.0.0.1: a file of many chunks, fetched over one or several connections,
summed in pieces; a corrupted byte, a dying peer and a wrong range are all refused."""

from __future__ import annotations

import os
import socket
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from glidein_ext.cache.checksum import FileMeta
from glidein_ext.cache.peer import PeerClient, PeerServer
from glidein_ext.cache.store import CacheStore
from glidein_ext.errors import TransferError
from tests.support.background import BackgroundLoop

KEY = b"site-key-0123456789abcdef"
MB = 1024 * 1024
CHUNK = 64 * 1024
LFN = "/store/chunked/file.root"
SIZE = 2 * MB + 12_345  # many chunks, the last one short


@pytest.fixture
def data() -> bytes:
    return os.urandom(SIZE)


def _store(path: Path) -> CacheStore:
    return CacheStore(path, 64 * MB, fsync=False)


def _client(connections: int, *, fast_checksum: bool = True) -> PeerClient:
    return PeerClient(
        KEY, connections=connections, checksum_threads=2, chunk=CHUNK, fast_checksum=fast_checksum
    )


@pytest.fixture
def mine(tmp_path: Path) -> CacheStore:
    """The fetching side's cache."""
    return _store(tmp_path / "mine")


@pytest.fixture
def serving(tmp_path: Path, data: bytes) -> Iterator[PeerServer]:
    """A peer's file server over its cache (``.store``), which holds the file."""
    store = _store(tmp_path / "peer")
    store.insert_bytes(LFN, data)
    with PeerServer(store, KEY, max_transfers=4) as server:
        yield server


def _nothing_kept(store: CacheStore) -> bool:
    return LFN not in store and not store.path_of(LFN).exists() and os.listdir(store.tmp) == []


@pytest.mark.parametrize("connections", [1, 3])
@pytest.mark.parametrize("known", [True, False])
def test_a_file_of_many_chunks_arrives_whole(
    mine: CacheStore, serving: PeerServer, data: bytes, connections: int, known: bool
) -> None:
    client = _client(connections)
    expected = FileMeta(len(data), zlib.adler32(data)) if known else None  # else the Digest
    path = client.fetch(serving.address, LFN, mine, expected)
    assert path.read_bytes() == data
    assert mine.lookup(LFN) == path
    assert os.listdir(mine.tmp) == []
    # the client may hold every byte before the handler threads add theirs to the count:
    # stopping the server joins them (block_on_close), so the count is final
    serving.stop()
    assert serving.bytes_sent == len(data)


@pytest.mark.parametrize("connections", [1, 3])
@pytest.mark.parametrize("where", [0, CHUNK + 7, SIZE - 1])
@pytest.mark.parametrize("fast", [True, False])
def test_one_corrupted_byte_is_detected_and_the_file_not_kept(
    mine: CacheStore, serving: PeerServer, data: bytes, connections: int, where: int, fast: bool
) -> None:
    with open(serving.store.path_of(LFN), "r+b") as handle:  # the peer's disk rots one byte
        handle.seek(where)
        handle.write(bytes([data[where] ^ 0x01]))
    client = _client(connections, fast_checksum=fast)
    with pytest.raises(TransferError, match=r"adler32 [0-9a-f]{8}, expected"):
        client.fetch(serving.address, LFN, mine, FileMeta(len(data), zlib.adler32(data)))
    assert _nothing_kept(mine)
    assert mine.used == 0


def test_a_busy_server_turns_extra_connections_away_and_the_rest_finish(
    tmp_path: Path, mine: CacheStore, data: bytes
) -> None:
    store = _store(tmp_path / "peer")
    store.insert_bytes(LFN, data)
    client = _client(4)
    with PeerServer(store, KEY, max_transfers=1) as server:
        for _ in range(20):  # 503 when every connection was turned away: try again
            try:
                path = client.fetch(server.address, LFN, mine, FileMeta(SIZE, zlib.adler32(data)))
                break
            except TransferError as exc:
                assert "503" in str(exc)
                assert _nothing_kept(mine)
        else:
            pytest.fail("always busy")
    assert path.read_bytes() == data


class _BadPeer(BackgroundLoop):
    """A raw HTTP peer on 127.0.0.1 that answers every GET with a good header and then either
    dies after ``cut`` bytes of the body or names another range than the one asked for."""

    def __init__(self, data: bytes, *, cut: int | None = None, shift_range: bool = False) -> None:
        super().__init__("bad-peer")
        self.data = data
        self.cut = cut
        self.shift_range = shift_range
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.address = self.listener.getsockname()[:2]
        self.handlers: list[threading.Thread] = []

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        for handler in self.handlers:
            handler.join()
        self.listener.close()

    def step(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except TimeoutError:
            return
        handler = threading.Thread(target=self._answer, args=(conn,))
        self.handlers.append(handler)
        handler.start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            request = b""
            while b"\r\n\r\n" not in request:
                got = conn.recv(4096)
                if not got:
                    return
                request += got
            first, last = 0, len(self.data) - 1
            status = "200 OK"
            for line in request.decode().split("\r\n"):
                if line.lower().startswith("range: bytes="):
                    first_text, last_text = line.split("=", 1)[1].split("-")
                    first, last = int(first_text), int(last_text)
                    status = "206 Partial Content"
            shown = (first + 1, last + 1) if self.shift_range else (first, last)
            head = (
                f"HTTP/1.1 {status}\r\nContent-Length: {last - first + 1}\r\n"
                f"Content-Range: bytes {shown[0]}-{shown[1]}/{len(self.data)}\r\n"
                "Connection: close\r\n\r\n"
            )
            body = self.data[first : last + 1]
            if self.cut is not None:
                body = body[: self.cut]
            conn.sendall(head.encode() + body)


@pytest.mark.parametrize("connections", [1, 3])
def test_a_peer_that_dies_mid_transfer_leaves_nothing(
    mine: CacheStore, data: bytes, connections: int
) -> None:
    client = _client(connections)
    with (
        _BadPeer(data, cut=3 * CHUNK + 5) as peer,
        pytest.raises(TransferError, match=r"transfer broken after [0-9]+ bytes"),
    ):
        client.fetch(peer.address, LFN, mine, FileMeta(SIZE, zlib.adler32(data)))
    assert _nothing_kept(mine)
    assert mine.used == 0


def test_a_range_answered_with_other_bytes_is_refused(mine: CacheStore, data: bytes) -> None:
    client = _client(3)
    with (
        _BadPeer(data, shift_range=True) as peer,
        pytest.raises(TransferError, match=r"asked for bytes [0-9]+-[0-9]+/"),
    ):
        client.fetch(peer.address, LFN, mine, FileMeta(SIZE, zlib.adler32(data)))
    assert _nothing_kept(mine)
