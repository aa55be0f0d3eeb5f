"""The peer file server and client: pilots of one site fetch each other's cached files.

Delgado Peris 2014 §III.A: "every pilot runs a simple file server accepting requests from other
peers"; a pilot that finds a replica's location fetches the file and adds it to its own cache, and
the
job falls back to the SE on failure.  Here:

- ``GET``/``HEAD /cache/<percent-encoded LFN>`` serve a cached file; ``Range: bytes=`` (one
  range) gives ``206``; the whole file comes with ``Digest: adler32=<8 hex>`` (RFC 3230, the
  form dCache uses);
- every request is authenticated with the site key (:mod:`glidein_ext.cache.peerauth`): 401
  otherwise;
- at most ``max_transfers`` transfers run at once; more get ``503`` with ``Retry-After`` (the
  client then moves on to the next source);
- the body is sent with ``socket.sendfile`` (zero copy);
- the client receives into buffers that worker threads sum (adler32, per chunk) and write at
  their offsets into the cache's atomic writer, optionally over several range connections; the
  chunks' sums are combined into the whole file's (zlib's adler32_combine), and the size and
  adler32 are checked against the expected values (the catalog's or the SE's; the server's
  Digest when none is known) before the file is renamed into the cache.  Any failure raises
  TransferError, so the caller falls back to the next peer and the SE.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import os
import re
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, BinaryIO

from glidein_ext.cache import peerauth
from glidein_ext.cache.checksum import (
    FileMeta,
    adler32_backend,
    adler32_handle,
    format_adler32,
    parse_adler32,
    plan_chunks,
)
from glidein_ext.cache.chunkwriter import ChunkWriter
from glidein_ext.cache.httprange import Unsatisfiable, parse_range
from glidein_ext.cache.safeopen import open_beneath
from glidein_ext.cache.store import CacheStore, check_lfn
from glidein_ext.errors import CacheError, TransferError

log = logging.getLogger(__name__)

PREFIX = "/cache"
DEFAULT_MAX_TRANSFERS = 8
DEFAULT_TIMEOUT = 30.0
READ_CHUNK = 1024 * 1024  # a received buffer: summed and written while still in the CPU's cache
# Range requests at once for a file of two chunks or more: two reached 78-100% of the loopback
# TCP ceiling where one reached 76-91% (four quiet runs of bench/cache_bench.py, 2-core
# development machine; 59% against 50% in an earlier quiet run, on another one).  Each
# connection takes one of the serving peer's transfer slots.
DEFAULT_CONNECTIONS = 2
Address = tuple[str, int]
_CONTENT_RANGE_TOTAL = re.compile(r"^bytes (?:\d+-\d+|\*)/(\d+)$")  # RFC 9110 14.4
_DIGEST = re.compile(r"(?:^|,)\s*adler32=([0-9A-Fa-f]{8})\s*(?:,|$)")


def default_checksum_threads(backend: str) -> int:
    """Threads summing and writing received chunks.  zlib releases the GIL while it sums: one
    per core, at least 2 (the receiving thread then never waits on a sum), at most 8.  ISA-L
    keeps the GIL (for a fifth of zlib's time), so more sum threads cannot sum at once: 2, so
    that one chunk's ``pwrite`` (which releases it) overlaps the next chunk's sum."""
    if backend != "zlib":
        return 2
    return max(2, min(8, os.cpu_count() or 1))


def url_path(lfn: str) -> str:
    """The request path for ``lfn``."""
    return PREFIX + urllib.parse.quote(check_lfn(lfn), safe="/")


class _DigestMemo:
    """adler32 of served files, remembered by (inode, size, mtime) so a file is read once."""

    def __init__(self, limit: int = 4096) -> None:
        self._values: dict[tuple[int, int, int, int], int] = {}
        self._limit = limit
        self._lock = threading.Lock()

    def get(self, handle: BinaryIO, st: os.stat_result) -> int:
        """The checksum of the open ``handle`` (read from the start; the position is kept)."""
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            value = self._values.get(key)
        if value is None:
            position = handle.tell()
            handle.seek(0)
            value = adler32_handle(handle)
            handle.seek(position)
            with self._lock:
                if len(self._values) >= self._limit:
                    self._values.clear()
                self._values[key] = value
        return value


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins the handler threads: they have an owner
    block_on_close = True

    def __init__(self, address: Address, peer: PeerServer) -> None:
        self.peer = peer
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A peer that hangs up (or stalls past the timeout) mid-transfer is one log line, not
        socketserver's traceback on stderr; anything else is logged with its traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError, socket.timeout)):  # 3.9: distinct
            log.info("peer %s: the transfer ended early: %s", client_address[0], error)
        else:
            log.exception("peer %s: the request failed", client_address[0])


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = DEFAULT_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("peer %s: " + format, self.address_string(), *args)

    def do_HEAD(self) -> None:
        self._serve(send_body=False)

    def do_GET(self) -> None:
        self._serve(send_body=True)

    def _fail(self, status: HTTPStatus, extra: dict[str, str] | None = None) -> None:
        body = f"{status.value} {status.phrase}\n".encode()
        self.send_response(status)
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _serve(self, *, send_body: bool) -> None:
        peer = self.server.peer
        if not peerauth.verify(
            peer.key, self.headers.get("Authorization"), self.command, self.path, peer.clock()
        ):
            self._fail(HTTPStatus.UNAUTHORIZED, {"WWW-Authenticate": peerauth.SCHEME})
            return
        raw = self.path
        if not raw.startswith(PREFIX + "/"):
            self._fail(HTTPStatus.NOT_FOUND)
            return
        lfn = urllib.parse.unquote(raw[len(PREFIX) :])
        try:
            cached = peer.store.peek(lfn) is not None
        except CacheError:
            self._fail(HTTPStatus.BAD_REQUEST)
            return
        if not cached:
            self._fail(HTTPStatus.NOT_FOUND)
            return
        # The file is opened before a transfer slot is taken: a refusal (404, 403) never waits
        # for a slot nor holds one, so it is the same answer however busy the server is.
        try:  # never through a symlink, never outside data/ (see safeopen)
            handle = open_beneath(peer.store.data, lfn[1:])
        except FileNotFoundError:  # evicted between the lookup and the open
            self._fail(HTTPStatus.NOT_FOUND)
            return
        except OSError as exc:  # a symlink or a special file swapped into the cache
            log.warning("peer %s: refused %r: %s", self.address_string(), lfn, exc)
            self._fail(HTTPStatus.FORBIDDEN)
            return
        with handle:
            if not peer.slots.acquire(blocking=False):
                self._fail(HTTPStatus.SERVICE_UNAVAILABLE, {"Retry-After": "1"})
                return
            try:
                self._send_file(handle, send_body=send_body)
            finally:
                peer.slots.release()

    def _send_file(self, handle: BinaryIO, *, send_body: bool) -> None:
        peer = self.server.peer
        st = os.fstat(handle.fileno())
        try:
            wanted = parse_range(self.headers.get("Range"), st.st_size)
        except Unsatisfiable:
            self._fail(
                HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                {"Content-Range": f"bytes */{st.st_size}"},
            )
            return
        if wanted is None:
            first, count = 0, st.st_size
            self.send_response(HTTPStatus.OK)
            if peer.send_digest:
                digest = format_adler32(peer.digests.get(handle, st))
                self.send_header("Digest", f"adler32={digest}")
        else:
            first, count = wanted[0], wanted[1] - wanted[0] + 1
            self.send_response(HTTPStatus.PARTIAL_CONTENT)
            self.send_header("Content-Range", f"bytes {wanted[0]}-{wanted[1]}/{st.st_size}")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(count))
        self.send_header("Connection", "close")  # one transfer per connection
        self.end_headers()
        if send_body and count:
            self.connection.sendfile(handle, first, count)
        with peer.stats_lock:
            peer.bytes_sent += count if send_body else 0
            peer.requests += 1


class PeerServer:
    """A pilot's file server over its cache; ``start()``/``stop()`` or use as a context manager."""

    def __init__(
        self,
        store: CacheStore,
        key: bytes,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_transfers: int = DEFAULT_MAX_TRANSFERS,
        send_digest: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_transfers < 1:
            raise CacheError(f"max_transfers must be at least 1, got {max_transfers}")
        self.store = store
        self.key = key
        self.clock = clock
        self.send_digest = send_digest
        self.slots = threading.BoundedSemaphore(max_transfers)
        self.digests = _DigestMemo()
        self.stats_lock = threading.Lock()
        self.bytes_sent = 0
        self.requests = 0
        self._bind = (host, port)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> Address:
        if self._server is None:
            raise CacheError("the peer file server is not running")
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> Address:
        if self._server is not None:
            return self.address
        try:
            self._server = _Server(self._bind, self)
        except OSError as exc:
            raise CacheError(f"cannot bind the peer file server to {self._bind}: {exc}") from exc
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="peer-file-server",
        )
        self._thread.start()
        return self.address

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.shutdown()
        thread.join()
        server.server_close()
        self._server = None
        self._thread = None

    def __enter__(self) -> PeerServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PeerClient:
    """Fetches files from peer file servers into a cache, checking size and adler32.

    ``connections`` range requests run at once for a file of at least two chunks (one
    connection: one plain ``GET``); ``checksum_threads`` threads sum and write the received
    chunks (:class:`~glidein_ext.cache.chunkwriter.ChunkWriter`) while the connections go on
    receiving; ``chunk`` is the size of one received buffer.  ``fast_checksum``: ISA-L's adler32
    where python-isal is installed (:func:`~glidein_ext.cache.checksum.adler32_backend`).
    """

    def __init__(
        self,
        key: bytes,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        clock: Callable[[], float] = time.time,
        connections: int = DEFAULT_CONNECTIONS,
        checksum_threads: int | None = None,
        chunk: int = READ_CHUNK,
        fast_checksum: bool = True,
    ) -> None:
        self.checksum_name, self._adler32 = adler32_backend(fast_checksum)
        threads = (
            default_checksum_threads(self.checksum_name)
            if checksum_threads is None
            else checksum_threads
        )
        if connections < 1 or threads < 1 or chunk < 1:
            raise CacheError(
                "a peer client needs at least 1 connection, 1 checksum thread and 1-byte chunks"
            )
        self.key = key
        self.timeout = timeout
        self.clock = clock
        self.connections = connections
        self.checksum_threads = threads
        self.chunk = chunk

    def _request(
        self, address: Address, method: str, lfn: str, headers: dict[str, str] | None = None
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        path = url_path(lfn)
        all_headers = {
            "Authorization": peerauth.authorization(self.key, method, path, self.clock())
        }
        all_headers.update(headers or {})
        conn = http.client.HTTPConnection(address[0], address[1], timeout=self.timeout)
        try:
            conn.request(method, path, headers=all_headers)
            return conn, conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise TransferError(f"peer {address[0]}:{address[1]}: {method} {lfn}: {exc}") from exc

    def fetch(
        self,
        address: Address,
        lfn: str,
        store: CacheStore,
        expected: FileMeta | None = None,
    ) -> Path:
        """Copy ``lfn`` from the peer at ``address`` into ``store``; verified or TransferError.

        The file appears in ``store`` only after its size and whole-file adler32 matched
        ``expected`` (else the server's ``Digest``); otherwise nothing of it is kept.
        """
        where = f"peer {address[0]}:{address[1]}: {lfn}"
        if self.connections > 1 and expected is None:
            expected = self._offered_meta(address, lfn, where)
        if expected is not None and self.connections > 1 and expected.size >= 2 * self.chunk:
            return self._fetch_ranges(address, lfn, store, expected, where)
        conn, resp = self._request(address, "GET", lfn)
        with contextlib.closing(conn):
            if resp.status != HTTPStatus.OK:
                raise TransferError(f"{where}: HTTP {resp.status} {resp.reason}")
            length = _content_length(resp, where)
            if expected is None:
                expected = _served_meta(resp.getheader("Digest"), length, where)
            elif length != expected.size:
                raise TransferError(
                    f"{where}: offered size {length} bytes, expected {expected.size}"
                )
            with store.writer(lfn, length) as out:
                with self._chunk_writer(out, 1, length) as sink:
                    _receive(resp, sink, 0, length, where, threading.Event())
                    got = _finish(sink, length, where)
                _check_written(out, expected, got, where)
        return store.path_of(lfn)

    def _offered_meta(self, address: Address, lfn: str, where: str) -> FileMeta:
        """The size and the ``Digest`` the peer gives for ``lfn`` (a ``HEAD``)."""
        conn, resp = self._request(address, "HEAD", lfn)
        with contextlib.closing(conn):
            if resp.status != HTTPStatus.OK:
                raise TransferError(f"{where}: HTTP {resp.status} {resp.reason}")
            return _served_meta(resp.getheader("Digest"), _content_length(resp, where), where)

    def _chunk_writer(self, out: BinaryIO, connections: int, size: int) -> ChunkWriter:
        chunks = -(-size // self.chunk)
        threads = max(1, min(self.checksum_threads, chunks))  # a small file: one thread
        return ChunkWriter(
            out.fileno(),
            threads=threads,
            chunk=self.chunk,
            buffers=threads + connections + 1,
            adler32=self._adler32,
        )

    def _fetch_ranges(
        self, address: Address, lfn: str, store: CacheStore, expected: FileMeta, where: str
    ) -> Path:
        """Fetch ``lfn`` as ``connections`` ranges at once, each checked against the request.

        Each connection takes segments until none is left; one that the server turns away (503:
        its transfer slots are busy) puts its segment back and stops, and the others take it.
        Segments left when every connection stopped make the fetch fail with that 503.
        """
        size = expected.size
        per_connection = -(-size // self.connections)
        segment = -(-per_connection // self.chunk) * self.chunk
        pending = list(reversed(plan_chunks(0, size, segment)))
        lock = threading.Lock()
        stop = threading.Event()
        errors: list[BaseException] = []

        def pull(sink: ChunkWriter) -> None:
            try:
                while not stop.is_set():
                    with lock:
                        if not pending:
                            return
                        first, length = pending.pop()
                    if not self._range_into(address, lfn, sink, (first, length, size), where, stop):
                        with lock:
                            pending.append((first, length))
                        return
            except BaseException as exc:  # noqa: BLE001 - handed to the fetching thread
                with lock:
                    errors.append(exc)  # before stop: the first error is the cause, not a stop
                stop.set()

        with store.writer(lfn, size) as out:
            count = min(self.connections, len(pending))
            with self._chunk_writer(out, count, size) as sink:
                pullers = [
                    threading.Thread(target=pull, args=(sink,), name=f"peer-range-{i}")
                    for i in range(count)
                ]
                for puller in pullers:
                    puller.start()
                for puller in pullers:
                    puller.join()
                if errors:
                    raise errors[0]
                if pending:
                    raise TransferError(f"{where}: HTTP 503 Service Unavailable")
                got = _finish(sink, size, where)
            _check_written(out, expected, got, where)
        return store.path_of(lfn)

    def _range_into(
        self,
        address: Address,
        lfn: str,
        sink: ChunkWriter,
        span: tuple[int, int, int],
        where: str,
        stop: threading.Event,
    ) -> bool:
        """Receive ``span`` = (first, length, file size): bytes ``first..first+length-1`` into
        ``sink``; False if the peer said 503 (its transfer slots are busy)."""
        first, length, size = span
        last = first + length - 1
        conn, resp = self._request(address, "GET", lfn, {"Range": f"bytes={first}-{last}"})
        with contextlib.closing(conn):
            if resp.status == HTTPStatus.SERVICE_UNAVAILABLE:
                return False
            offered = _CONTENT_RANGE_TOTAL.search(resp.getheader("Content-Range") or "")
            if offered is not None and int(offered.group(1)) != size:  # 206 or 416 alike
                raise TransferError(
                    f"{where}: offered size {int(offered.group(1))} bytes, expected {size}"
                )
            if resp.status != HTTPStatus.PARTIAL_CONTENT:
                raise TransferError(f"{where}: HTTP {resp.status} {resp.reason} to a range")
            wanted = f"bytes {first}-{last}/{size}"
            if resp.getheader("Content-Range") != wanted:
                raise TransferError(
                    f"{where}: asked for {wanted}, "
                    f"answered Content-Range {resp.getheader('Content-Range')!r}"
                )
            if _content_length(resp, where) != length:
                raise TransferError(f"{where}: Content-Length of {wanted} is not {length}")
            _receive(resp, sink, first, length, where, stop)
        return True

    def fetch_range(self, address: Address, lfn: str, first: int, last: int) -> bytes:
        """Bytes ``first..last`` (inclusive) of ``lfn`` from the peer (a 206 answer)."""
        where = f"peer {address[0]}:{address[1]}: {lfn}"
        conn, resp = self._request(address, "GET", lfn, {"Range": f"bytes={first}-{last}"})
        with contextlib.closing(conn):
            try:
                body = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                raise TransferError(f"{where}: {exc}") from exc
            if resp.status != HTTPStatus.PARTIAL_CONTENT:
                raise TransferError(f"{where}: HTTP {resp.status} {resp.reason}")
            return body


def _content_length(resp: http.client.HTTPResponse, where: str) -> int:
    text = resp.getheader("Content-Length")
    if text is None or not text.isdigit():
        raise TransferError(f"{where}: no Content-Length")
    return int(text)


def _served_meta(digest: str | None, length: int, where: str) -> FileMeta:
    match = _DIGEST.search(digest or "")
    if match is None:
        raise TransferError(f"{where}: no expected checksum and no adler32 Digest from the peer")
    return FileMeta(length, parse_adler32(match.group(1)))


def _receive(
    resp: http.client.HTTPResponse,
    sink: ChunkWriter,
    first: int,
    length: int,
    where: str,
    stop: threading.Event,
) -> None:
    """Receive the ``length`` bytes of ``resp``'s body (bytes ``first..`` of the file) into the
    sink's buffers, handing each full one to be summed and written.  A broken or short
    transfer is a TransferError; a write error of the sink (OSError) passes through."""
    received = 0
    while received < length:
        if stop.is_set():
            raise TransferError(f"{where}: transfer stopped after {first + received} bytes")
        buf = sink.take()
        view = memoryview(buf)
        want = min(len(buf), length - received)
        filled = 0
        try:
            while filled < want:
                try:
                    n = resp.readinto(view[filled:want])
                except (OSError, http.client.HTTPException) as exc:
                    raise TransferError(
                        f"{where}: transfer broken after {first + received + filled} bytes: {exc}"
                    ) from exc
                if not n:
                    raise TransferError(
                        f"{where}: transfer broken after {first + received + filled} bytes: "
                        f"the peer closed the connection ({first + length} expected)"
                    )
                filled += n
        except BaseException:
            view.release()
            sink.give_back(buf)
            raise
        view.release()
        sink.submit(buf, first + received, filled)
        received += filled


def _finish(sink: ChunkWriter, size: int, where: str) -> int:
    try:
        return sink.finish(size)
    except ValueError as exc:  # the chunks do not tile the file: never accept it
        raise TransferError(f"{where}: {exc}") from exc


def _check_written(out: BinaryIO, expected: FileMeta, adler32: int, where: str) -> None:
    """The file written (its size on disk) and its adler32 against ``expected``."""
    size = out.seek(0, os.SEEK_END)  # chunks were written at their offsets, not by write()
    expected.check(size, adler32, where)
