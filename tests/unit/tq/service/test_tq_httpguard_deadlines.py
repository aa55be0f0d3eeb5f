"""The server's request deadlines (``httpguard.deadline_protocol``): a timer runs only while a
request is incomplete after a read (for its headers, then for its body), none for a request that
arrives whole, and an expired one closes the connection."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from glidein_ext.tq.service.httpguard import deadline_protocol
from tests.unit.tq.service.test_tq_httpguard_coalesced import Recording

HEADERS, BODY = 11.0, 61.0  # the deadlines (not uvicorn's keep-alive timer's 5 s)
HEAD = b"POST /x HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: 2\r\n"


async def _answer(scope: Any, receive: Callable[[], Awaitable[Any]], send: Any) -> None:
    if scope["type"] == "http":
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def _connection(header: float = HEADERS, body: float = BODY) -> tuple[Any, Recording]:
    config = uvicorn.Config(_answer, log_level="warning")
    config.load()
    protocol = deadline_protocol(header, body)(  # type: ignore[call-arg]
        config=config, server_state=ServerState(), app_state={}
    )
    transport = Recording()
    protocol.connection_made(transport)
    return protocol, transport


def _waits_for(protocol: Any) -> str | None:
    """What the connection's timer waits for (None: no timer)."""
    return protocol._armed if protocol._deadline is not None else None


def _count_timers(protocol: Any) -> list[float]:
    """The delays of the deadlines' timers the connection arms from now on."""
    armed: list[float] = []
    call_later = protocol.loop.call_later

    def counted(delay: float, callback: Any, *args: Any) -> Any:
        if delay in (HEADERS, BODY):
            armed.append(delay)
        return call_later(delay, callback, *args)

    protocol.loop = _Loop(protocol.loop, counted)
    return armed


class _Loop:
    """The running loop, but for its ``call_later`` (counted)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, call_later: Any) -> None:
        self._loop = loop
        self.call_later = call_later

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loop, name)


def test_a_request_that_arrives_whole_arms_no_timer() -> None:
    async def scenario() -> tuple[list[str | None], list[float]]:
        protocol, _ = _connection()
        waits = [_waits_for(protocol)]  # a new connection: its first request's headers
        armed = _count_timers(protocol)
        protocol.data_received(HEAD + b"\r\n{}")
        waits.append(_waits_for(protocol))
        await asyncio.sleep(0.01)  # the answer
        protocol.data_received(HEAD + b"\r\n{}")  # the next, kept alive
        waits.append(_waits_for(protocol))
        await asyncio.sleep(0.01)
        protocol.connection_lost(None)
        return waits, armed

    assert asyncio.run(scenario()) == (["headers", None, None], [])


def test_a_request_in_pieces_waits_for_its_headers_then_for_its_body() -> None:
    async def scenario() -> tuple[list[str | None], list[float]]:
        protocol, _ = _connection()
        protocol.data_received(HEAD + b"\r\n{}")
        await asyncio.sleep(0.01)
        armed = _count_timers(protocol)
        waits = []
        for piece in (HEAD[:20], HEAD[20:], b"\r\n", b"{", b"}"):
            protocol.data_received(piece)
            waits.append(_waits_for(protocol))
        await asyncio.sleep(0.01)
        protocol.connection_lost(None)
        return waits, armed

    waits, armed = asyncio.run(scenario())
    assert waits == ["headers", "headers", "body", "body", None]
    assert armed == [HEADERS, BODY]  # one timer for the headers, one for the body


def test_a_body_past_its_deadline_closes_the_connection() -> None:
    async def scenario() -> tuple[bool, bool]:
        protocol, transport = _connection(header=5.0, body=0.05)
        protocol.data_received(HEAD + b"\r\n{")
        closed_at_once = transport.is_closing()
        await asyncio.sleep(0.2)
        return closed_at_once, transport.is_closing()

    assert asyncio.run(scenario()) == (False, True)
