"""The node's UDP socket set-up and address resolution (the I/O edge of :mod:`node`)."""

from __future__ import annotations

import asyncio
import logging
import socket

from glidein_ext.dht.contact import Address
from glidein_ext.errors import DhtError

log = logging.getLogger(__name__)

RECEIVE_BUFFER = 1 << 20
"""Socket receive buffer asked for, so that a few full-size datagrams can queue (the kernel caps
it at net.core.rmem_max)."""


def tune_socket(transport: asyncio.BaseTransport) -> None:
    """A receive buffer for a few full datagrams, and reads no larger than a datagram.

    The selector loop reads every datagram into a 256 KiB buffer by default, which glibc serves
    with an mmap per read; one datagram's size is below its mmap threshold (a third of the
    get latency on loopback).
    """
    if hasattr(transport, "max_size"):
        transport.max_size = 65535  # the largest UDP payload
    sock = transport.get_extra_info("socket")
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    except OSError as exc:
        log.debug("cannot enlarge the UDP receive buffer: %s", exc)


async def resolve(loop: asyncio.AbstractEventLoop, address: Address) -> Address:
    """A host name to the numeric address its answers will come from."""
    host, port = address
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except OSError as exc:
        raise DhtError(f"cannot resolve {host}:{port}: {exc}") from exc
    family_host = infos[0][4][0]
    return (str(family_host), port)
