"""A real ``tq serve`` sends each answer in one TCP segment (head and body written together,
``httpguard.Coalesced``), counted by the client socket's kernel (``TCP_INFO``'s
``tcpi_segs_in``) over keep-alive requests; an answer before ``Connection: close`` arrives whole,
with its Date and without a Server line."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable

from glidein_ext.testbed.tq_server import TqServer

REQUESTS = 50
# struct tcp_info (linux/tcp.h): tcpi_segs_out then tcpi_segs_in, u32 each, at byte 136
_SEGS_IN = 140


def _segments_in(sock: socket.socket) -> int:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    assert len(info) >= _SEGS_IN + 4, "this kernel's TCP_INFO has no tcpi_segs_in"
    return int(struct.unpack_from("=I", info, _SEGS_IN)[0])


def _answer(sock: socket.socket) -> tuple[bytes, bytes]:
    """One HTTP answer: its head and its body (by its Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection mid-answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")[1:]
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection mid-body"
        body += chunk
    return head, body


def _get(port: int, close: bool = False) -> bytes:
    connection = b"close" if close else b"keep-alive"
    return b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: %s\r\n\r\n" % (
        port,
        connection,
    )


def test_each_answer_is_one_segment_on_a_kept_alive_connection(
    tq_server: Callable[..., TqServer],
) -> None:
    server = tq_server()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(_get(server.port))
        assert _answer(sock)[0].startswith(b"HTTP/1.1 200")  # connected, warm
        before = _segments_in(sock)
        for _ in range(REQUESTS):
            sock.sendall(_get(server.port))
            head, body = _answer(sock)
            assert head.startswith(b"HTTP/1.1 200") and body
        received = _segments_in(sock) - before
    # one segment per answer (the server's ACK of the request rides on it); a delayed ACK sent
    # alone, on a loaded machine, may add a few; head and body apart would be 2 per answer
    assert REQUESTS <= received <= REQUESTS * 1.4, received


def test_an_answer_before_connection_close_arrives_whole(
    tq_server: Callable[..., TqServer],
) -> None:
    server = tq_server()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(_get(server.port, close=True))
        head, body = _answer(sock)
        assert head.startswith(b"HTTP/1.1 200")
        assert b"connection: close" in head.lower()
        assert b"\r\ndate: " in head.lower()  # RFC 9110 6.6.1: an origin server with a clock
        assert b"\r\nserver:" not in head.lower()  # the software is not named
        assert body.startswith(b"{")
        assert sock.recv(65536) == b""  # then the server closes
