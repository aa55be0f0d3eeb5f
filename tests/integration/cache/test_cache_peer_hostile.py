"""Hostile input against the peer file server on 127.0.0.1 (docs/cache.md,
"Hostile input"): links swapped into the cache, absurd Range headers, malformed names and
credentials.  Every case gets its proper HTTP answer and the server then serves the next request.
"""

from __future__ import annotations

import http.client
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from glidein_ext.cache import peerauth
from glidein_ext.cache.peer import PeerClient, PeerServer, url_path
from glidein_ext.cache.store import CacheStore
from glidein_ext.errors import TransferError

KEY = b"site-key-0123456789abcdef"
BODY = bytes(range(256)) * 4  # 1024 bytes
SECRET = b"root:x:0:0:the pilot's secret\n"
DIGITS = "9" * 5000


def _serve(root: Path) -> Iterator[tuple[CacheStore, PeerServer]]:
    store = CacheStore(root, 1024 * 1024, fsync=False)
    store.insert_bytes("/store/good", BODY)
    store.insert_bytes("/store/victim/file", b"v" * 10)
    with PeerServer(store, KEY, max_transfers=2) as server:
        yield store, server


def _still_serving(server: PeerServer) -> None:
    """After every case the server answers the next request with the whole file.  A 503 with
    its Retry-After is that answer too, later: the last case's handler thread may still hold
    its transfer slot a moment after its client read the whole answer (a loaded machine), as
    may the case's before it (``max_transfers=2``); a client retries (``PeerClient``)."""
    deadline = time.monotonic() + 10
    status, headers, body = _get(server, url_path("/store/good"))
    while status == 503 and time.monotonic() < deadline:
        assert headers.get("Retry-After") == "1"
        time.sleep(0.1)
        status, headers, body = _get(server, url_path("/store/good"))
    assert (status, body) == (200, BODY)


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[tuple[CacheStore, PeerServer]]:
    """A server of its own, for a case that damages the cache."""
    for store, server in _serve(tmp_path / "cache"):
        yield store, server
        _still_serving(server)


@pytest.fixture(scope="module")
def _one_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[CacheStore, PeerServer]]:
    yield from _serve(tmp_path_factory.mktemp("hostile") / "cache")


@pytest.fixture
def shared(
    _one_server: tuple[CacheStore, PeerServer],
) -> Iterator[tuple[CacheStore, PeerServer]]:
    """One server for the cases that only send requests."""
    yield _one_server
    _still_serving(_one_server[1])


def _get(
    server: PeerServer, path: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    """One signed request with a raw ``path`` (percent-encoded as the attacker chose)."""
    auth = peerauth.authorization(KEY, method, path, server.clock())
    conn = http.client.HTTPConnection(*server.address, timeout=10)
    try:
        conn.request(method, path, headers={"Authorization": auth, **(headers or {})})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


# -- links and special files swapped into the cache ------------------------------


def _swap_file(store: CacheStore, tmp_path: Path, how: str) -> None:
    """Replace the cached /store/victim/file (or its directory) the way ``how`` says."""
    victim = store.path_of("/store/victim/file")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "file").write_bytes(SECRET)
    if how == "parent-dir-symlink":
        (victim.parent / "file").unlink()
        victim.parent.rmdir()
        victim.parent.symlink_to(outside)
        return
    victim.unlink()
    if how == "symlink-to-etc-passwd":
        victim.symlink_to("/etc/passwd")
    elif how == "symlink-outside":
        victim.symlink_to(outside / "file")
    elif how == "relative-symlink-escape":
        victim.symlink_to("../../../outside/file")
    elif how == "symlink-inside-cache":
        victim.symlink_to(store.path_of("/store/good"))
    elif how == "fifo":
        os.mkfifo(victim)
    elif how == "directory":
        victim.mkdir()
    else:
        raise AssertionError(how)


SWAPS = [
    "symlink-to-etc-passwd",
    "symlink-outside",
    "relative-symlink-escape",
    "symlink-inside-cache",
    "parent-dir-symlink",
    "fifo",
    "directory",
]


@pytest.mark.parametrize("how", SWAPS)
def test_a_link_or_special_file_swapped_into_the_cache_is_refused(
    tmp_path: Path, serving: tuple[CacheStore, PeerServer], how: str
) -> None:
    store, server = serving
    _swap_file(store, tmp_path, how)
    for method in ("GET", "HEAD"):
        status, _, body = _get(server, url_path("/store/victim/file"), method=method)
        assert status == 403, (method, body)
        assert SECRET not in body and b"root:" not in body
    mine = CacheStore(tmp_path / "mine", 1024 * 1024, fsync=False)
    with pytest.raises(TransferError, match="HTTP 403"):
        PeerClient(KEY).fetch(server.address, "/store/victim/file", mine)
    assert "/store/victim/file" not in mine


def test_a_swapped_link_is_refused_even_when_every_transfer_slot_is_busy(
    tmp_path: Path, serving: tuple[CacheStore, PeerServer]
) -> None:
    """A refusal takes no transfer slot: 403, not 503, while two long transfers run (the
    answer must not depend on whether the previous request's thread has let go of its slot)."""
    store, server = serving
    _swap_file(store, tmp_path, "symlink-to-etc-passwd")
    assert server.slots.acquire(blocking=False) and server.slots.acquire(blocking=False)
    try:
        assert _get(server, url_path("/store/victim/file"))[0] == 403
        assert _get(server, url_path("/store/no-such-file"))[0] == 404
        assert _get(server, url_path("/store/good"))[0] == 503  # a real transfer waits its turn
    finally:
        server.slots.release()
        server.slots.release()


# -- Range headers ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "status", "content_range"),
    [
        (f"bytes={DIGITS}-", 416, "bytes */1024"),  # first byte past any file
        (f"bytes={DIGITS}-{DIGITS}", 416, "bytes */1024"),
        (f"bytes={'9' * 60000}-", 416, "bytes */1024"),  # near the 64 KiB header line limit
        (f"bytes=0-{DIGITS}", 206, "bytes 0-1023/1024"),  # last past the end: to the end
        (f"bytes=-{DIGITS}", 206, "bytes 0-1023/1024"),  # suffix longer than the file
        (f"bytes={'0' * 5000}1-{'0' * 5000}2", 206, "bytes 1-2/1024"),  # leading zeros
        ("bytes=-0", 416, "bytes */1024"),
        ("bytes=1024-", 416, "bytes */1024"),
        (f"bytes={DIGITS}-1", 200, None),  # last before first: the header is ignored
        ("bytes=0-1,2-3", 200, None),  # several ranges: the whole file
        ("bytes=abc-def", 200, None),
        ("bytes=\u0663-".encode().decode("latin-1"), 200, None),  # UTF-8 of an Arabic 3
        ("lines=0-1", 200, None),
        ("bytes=-", 200, None),
    ],
)
def test_absurd_range_headers_get_an_answer(
    shared: tuple[CacheStore, PeerServer], header: str, status: int, content_range: str | None
) -> None:
    _, server = shared
    got, headers, body = _get(server, url_path("/store/good"), {"Range": header})
    assert got == status
    assert headers.get("Content-Range") == content_range
    if content_range is not None and status == 206:
        first, last = (int(x) for x in content_range.split()[1].split("/")[0].split("-"))
        assert body == BODY[first : last + 1]
    elif status == 200:
        assert body == BODY


def test_a_header_line_over_64_kib_is_refused(shared: tuple[CacheStore, PeerServer]) -> None:
    _, server = shared
    status, _, _ = _get(server, url_path("/store/good"), {"Range": f"bytes={'9' * 70000}-"})
    assert status == 431


# -- names and credentials ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/cache/store/..%2F..%2F..%2Fetc%2Fpasswd", 400),
        ("/cache/store/../../etc/passwd", 400),
        ("/cache/%2e%2e/%2e%2e/etc/passwd", 400),
        ("/cache//etc/passwd", 400),
        ("/cache/store/./good", 400),
        ("/cache/store/good%00.txt", 400),
        ("/cache/" + "a" * 5000, 400),  # over the LFN limit of 4096 characters
        ("/cache/store/" + "a" * 300, 404),  # a name component over 255 bytes: not cached
        ("/cache/store/%ff%fe", 404),  # not UTF-8
        ("/cache/store/good?x=1", 404),  # the query is part of the name: not cached
        ("/cache/store/good%0Aforged", 404),
        ("/cache/store", 404),
        ("/etc/passwd", 404),
        ("/cache/store/victim", 404),  # a directory of the cache is not a cached file
    ],
)
def test_malformed_and_escaping_names(
    shared: tuple[CacheStore, PeerServer], path: str, status: int
) -> None:
    _, server = shared
    got, _, body = _get(server, path)
    assert got == status
    assert b"root:" not in body


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Basic cm9vdDpyb290",
        f"{peerauth.SCHEME} ts={DIGITS},sig={'0' * 64}",
        f"{peerauth.SCHEME} ts=1,sig={'0' * 64}",  # 1970: far outside the window
        peerauth.authorization(b"another-site-key-00000", "GET", "/cache/store/good", 0.0),
    ],
)
def test_bad_credentials_are_401(
    shared: tuple[CacheStore, PeerServer], authorization: str | None
) -> None:
    _, server = shared
    conn = http.client.HTTPConnection(*server.address, timeout=10)
    try:
        headers = {} if authorization is None else {"Authorization": authorization}
        conn.request("GET", url_path("/store/good"), headers=headers)
        resp = conn.getresponse()
        assert resp.status == 401 and resp.read() != BODY
    finally:
        conn.close()


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_other_methods_are_not_implemented(
    shared: tuple[CacheStore, PeerServer], method: str
) -> None:
    _, server = shared
    status, _, _ = _get(server, url_path("/store/good"), method=method)
    assert status == 501


def test_a_peer_hanging_up_mid_transfer_is_one_log_line_not_a_traceback(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    store = CacheStore(tmp_path / "cache", 256 * 1024 * 1024, fsync=False)
    store.insert_bytes("/store/big", os.urandom(1024) * 32 * 1024)  # 32 MiB: more than buffers
    caplog.set_level("INFO", logger="glidein_ext.cache.peer")
    with PeerServer(store, KEY) as server:
        path = url_path("/store/big")
        for _ in range(3):
            auth = peerauth.authorization(KEY, "GET", path, server.clock())
            request = f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n\r\n"
            with socket.create_connection(server.address, timeout=10) as sock:
                sock.sendall(request.encode())
                assert sock.recv(4096).startswith(b"HTTP/1.1 200")
            # the reader went away with most of the file unsent
        deadline = time.monotonic() + 10
        while caplog.text.count("ended early") < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _get(server, url_path("/store/big"), {"Range": "bytes=0-9"})[0] == 206
    assert caplog.text.count("ended early") == 3
    assert "Traceback" not in capfd.readouterr().err
