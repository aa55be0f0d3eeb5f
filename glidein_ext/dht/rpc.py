"""Requests and responses over one UDP socket: the I/O edge under the node.

Every datagram is decoded and authenticated by the codec, then checked against the replay window;
whatever fails is counted and dropped (beyond the paper).  A request is answered by the handler the
node gives (synchronously, so one datagram never spawns a task); a response resolves the pending
request with the same nonce, if it came from the address the request went to.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Optional, cast

from glidein_ext.dht.contact import Address
from glidein_ext.dht.protocol import AuthError, Codec, Kind, Message, ProtocolError
from glidein_ext.dht.replay import ReplayGuard, Verdict

log = logging.getLogger(__name__)

RequestHandler = Callable[[Message, Address], Optional[list[Any]]]
"""Answers a request: the response body, or None for one-way messages."""


@dataclass
class NodeStats:
    """Counters a node keeps about its traffic; tests and the benchmark read them."""

    sent: int = 0
    received: int = 0
    dropped_malformed: int = 0
    dropped_auth: int = 0
    dropped_replay: int = 0
    dropped_unexpected: int = 0
    handler_errors: int = 0
    rpc_timeouts: int = 0
    broadcasts_handled: int = 0
    broadcasts_forwarded: int = 0
    broadcast_duplicates: int = 0
    broadcast_late_replies: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class RpcTimeout(Exception):
    """No response arrived in time."""


class RpcEndpoint(asyncio.DatagramProtocol):
    """One node's socket: sends requests, matches responses, hands requests to the node."""

    def __init__(
        self,
        codec: Codec,
        own_id: int,
        handler: RequestHandler,
        *,
        replay_window: float,
        stats: NodeStats,
        read_only: bool = False,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._codec = codec
        self._own_id = own_id
        self._handler = handler
        self._guard = ReplayGuard(replay_window)
        self._stats = stats
        self._read_only = read_only
        self._clock = wall_clock
        self._pending: dict[bytes, tuple[Address, asyncio.Future[Message]]] = {}
        self._transport: asyncio.DatagramTransport | None = None

    # --- asyncio.DatagramProtocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # The selector loop's datagram transport does not subclass asyncio.DatagramTransport.
        self._transport = cast(asyncio.DatagramTransport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        for _, future in self._pending.values():
            if not future.done():
                future.set_exception(RpcTimeout("endpoint closed"))
        self._pending.clear()

    def error_received(self, exc: Exception) -> None:
        log.debug("socket error: %s", exc)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self._stats.received += 1
        address: Address = (str(addr[0]), int(addr[1]))
        try:
            msg = self._codec.decode(data)
        except AuthError:
            self._stats.dropped_auth += 1
            return
        except ProtocolError:
            self._stats.dropped_malformed += 1
            return
        if self._guard.check(msg.sender, msg.nonce, msg.timestamp, self._clock()) != Verdict.FRESH:
            self._stats.dropped_replay += 1
            return
        if msg.response:
            self._accept_response(msg, address)
            return
        try:
            body = self._handler(msg, address)
        except ProtocolError:
            self._stats.dropped_malformed += 1
            return
        except Exception:  # contract: a handler's bug never takes the node down (logged)
            self._stats.handler_errors += 1
            log.exception("handler failed on %s from %s", msg.kind.name, address)
            return
        if body is not None:
            self._send(address, msg.kind, body, response=True, reply_to=msg.nonce)

    # --- sending -------------------------------------------------------------------------------

    @property
    def address(self) -> Address:
        if self._transport is None:
            raise RuntimeError("endpoint not open")
        host, port = self._transport.get_extra_info("sockname")[:2]
        return (str(host), int(port))

    def _send(
        self,
        address: Address,
        kind: Kind,
        body: list[Any],
        *,
        response: bool = False,
        reply_to: bytes | None = None,
    ) -> bytes:
        datagram, nonce = self._codec.encode(
            kind,
            self._own_id,
            body,
            timestamp=self._clock(),
            response=response,
            reply_to=reply_to,
            read_only=self._read_only,
        )
        if self._transport is not None:
            self._transport.sendto(datagram, address)
            self._stats.sent += 1
        return nonce

    def notify(self, address: Address, kind: Kind, body: list[Any]) -> None:
        """Send a one-way message."""
        self._send(address, kind, body)

    async def request(
        self, address: Address, kind: Kind, body: list[Any], timeout: float
    ) -> Message:
        """Send a request and wait for its response; raises RpcTimeout."""
        if self._transport is None:
            raise RpcTimeout("endpoint closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Message] = loop.create_future()
        nonce = self._send(address, kind, body)
        self._pending[nonce] = (address, future)
        timer = loop.call_later(timeout, self._expire, nonce)
        try:
            return await future
        finally:
            timer.cancel()
            self._pending.pop(nonce, None)

    def _expire(self, nonce: bytes) -> None:
        entry = self._pending.pop(nonce, None)
        if entry is not None and not entry[1].done():
            self._stats.rpc_timeouts += 1
            entry[1].set_exception(RpcTimeout("no response"))

    def _accept_response(self, msg: Message, address: Address) -> None:
        assert msg.reply_to is not None
        entry = self._pending.get(msg.reply_to)
        if entry is None or entry[0] != address or entry[1].done():
            self._stats.dropped_unexpected += 1
            return
        del self._pending[msg.reply_to]
        entry[1].set_result(msg)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
