"""The HTTP server's own limits, so that no client can hold it: what ``server.serve`` gives uvicorn.

- **Deadlines** (``deadline_protocol``): a request's headers must arrive within
  ``http_header_timeout`` seconds of its first byte (or of the connection), and its body within
  ``http_body_timeout`` of its headers; past either, the connection is closed (a timer runs only
  while a request is incomplete after a read: none for one that arrives whole).  uvicorn itself
  closes only idle keep-alive connections: one that trickles a header line every few seconds
  would be held for ever (the slowloris attack).  A deadline, not a timeout per read.
- **Concurrency** (``limit_concurrency``): beyond ``http_max_connections`` connections (or
  requests being served), a request is answered 503 at once.  It is kept below the open-files
  limit, so the service keeps descriptors for its database and for new connections.
- **Open files** (``raise_open_files``): the soft limit raised to the hard one at start; the
  default 1,024 is reached by a thousand idle clients.
- **Keep-alive**: an idle keep-alive connection is closed after ``KEEP_ALIVE`` seconds.
- **One write per answer** (``Coalesced``): uvicorn writes an answer's head and its body with
  two ``transport.write`` calls, each a ``send`` system call and a TCP segment of its own (the
  socket has ``TCP_NODELAY``); the writes of one step of the event loop go out together at its
  end.  A quarter of the service's CPU on a busy pilot's call was those two sends (py-spy).
"""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)

KEEP_ALIVE = 5  # seconds an idle keep-alive connection is kept (uvicorn's default)
RESERVED_FILES = 64  # descriptors kept for the database, the logs, the workers, accept()


def raise_open_files() -> int:
    """The soft open-files limit raised to the hard one (a process may); the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    if soft == unlimited:
        return 1 << 20
    wanted = max(soft, 1 << 20) if hard == unlimited else hard
    if soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-files limit from %d to %d: %s", soft, wanted, exc)
    return int(soft)


def max_connections(wanted: int, open_files: int) -> int:
    """``wanted``, or fewer: what the open-files limit leaves after ``RESERVED_FILES``."""
    return max(1, min(wanted, open_files - RESERVED_FILES))


def deadline_protocol(header_timeout: float, body_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with the two deadlines (seconds)."""

    class DeadlineProtocol(_Deadlines):
        pass

    DeadlineProtocol.header_timeout = header_timeout
    DeadlineProtocol.body_timeout = body_timeout
    return DeadlineProtocol


class _Deadlines(HttpToolsProtocol):
    """One timer per connection, armed only while a request is incomplete once the bytes
    received so far are handled: for its headers from its first bytes (or from the connection),
    then for its body from its headers; cleared when the request is complete (the answer may take
    as long as the call needs: a long poll).  A request that arrives whole in one read, as a
    pilot's call does, arms no timer at all."""

    header_timeout: float = 10.0
    body_timeout: float = 60.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._armed: str | None = None  # what the timer waits for: "headers" or "body"
        self._waiting: str | None = None  # what the request being received lacks

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(Coalesced(transport, self.loop))  # type: ignore[arg-type]
        self._waiting = "headers"
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        transport = self.transport
        lacking = self._waiting is not None and self._waiting != self._armed
        if lacking and transport is not None and not transport.is_closing():
            self._arm()

    def on_message_begin(self) -> None:
        self._waiting = "headers"  # a request's first bytes (on a kept-alive connection too)
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._waiting = "body"
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._waiting = None
        self._disarm()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        seconds = self.header_timeout if self._waiting == "headers" else self.body_timeout
        self._deadline = self.loop.call_later(seconds, self._expired)
        self._armed = self._waiting

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._armed = None

    def _expired(self) -> None:
        self._deadline = None
        self._armed = None
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class Coalesced:
    """A transport whose writes made in one step of the event loop go out as one write, at the
    end of that step (``loop.call_soon``); closing sends what is pending first, aborting drops
    it.  Everything else is the transport's own."""

    __slots__ = ("_loop", "_pending", "transport")

    def __init__(self, transport: asyncio.BaseTransport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport: Any = transport
        self._loop = loop
        self._pending: list[bytes] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if self._pending is None:
            self._pending = [bytes(data)]
            self._loop.call_soon(self.flush)
        else:
            self._pending.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Send what is pending now (a closing transport drops it, as it would a write)."""
        pending, self._pending = self._pending, None
        if pending and not self.transport.is_closing():
            self.transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def abort(self) -> None:
        self._pending = None
        self.transport.abort()

    def write_eof(self) -> None:
        self.flush()
        self.transport.write_eof()

    def get_write_buffer_size(self) -> int:
        pending = sum(map(len, self._pending)) if self._pending else 0
        return int(self.transport.get_write_buffer_size()) + pending

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)
