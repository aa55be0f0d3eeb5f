"""The server's transport wrapper (``httpguard.Coalesced``): the writes of one step of the event
loop leave as one write at its end; closing sends them first, aborting drops them."""

from __future__ import annotations

import asyncio
from typing import Any

from glidein_ext.tq.service.httpguard import Coalesced


class Recording(asyncio.Transport):
    """A transport that keeps what it is asked to do (the unit's test double)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []
        self.closing = False

    def write(self, data: Any) -> None:
        self.calls.append(("write", bytes(data)))

    def close(self) -> None:
        self.calls.append(("close", None))
        self.closing = True

    def abort(self) -> None:
        self.calls.append(("abort", None))
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 7

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 4242)}.get(name, default)


async def _step() -> None:
    await asyncio.sleep(0)  # what call_soon scheduled runs


def test_the_writes_of_one_step_leave_as_one_at_its_end() -> None:
    async def scenario() -> list[tuple[str, Any]]:
        inner = Recording()
        outer = Coalesced(inner, asyncio.get_running_loop())
        outer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        outer.write(b"")  # nothing to send: no write
        outer.write(bytearray(b"{}"))
        assert inner.calls == []  # not yet: the step goes on
        assert outer.get_write_buffer_size() == 7 + 38 + 2
        await _step()
        outer.writelines([b"a", b"b"])
        await _step()
        await _step()  # nothing pending: nothing more
        return inner.calls

    calls = asyncio.run(scenario())
    assert calls == [
        ("write", b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"),
        ("write", b"ab"),
    ]


def test_closing_sends_what_is_pending_first_and_aborting_drops_it() -> None:
    async def scenario(end: str) -> list[tuple[str, Any]]:
        inner = Recording()
        outer = Coalesced(inner, asyncio.get_running_loop())
        outer.write(b"head")
        outer.write(b"body")
        getattr(outer, end)()
        outer.write(b"late")  # after closing: the transport drops it, as it would
        await _step()
        await _step()
        return inner.calls

    assert asyncio.run(scenario("close")) == [("write", b"headbody"), ("close", None)]
    assert asyncio.run(scenario("abort")) == [("abort", None)]


def test_everything_else_is_the_transports_own() -> None:
    async def scenario() -> None:
        inner = Recording()
        outer = Coalesced(inner, asyncio.get_running_loop())
        assert outer.get_extra_info("peername") == ("127.0.0.1", 4242)
        assert outer.is_closing() is False
        inner.closing = True
        assert outer.is_closing() is True

    asyncio.run(scenario())
