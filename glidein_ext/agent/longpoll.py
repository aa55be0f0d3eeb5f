"""A call that may wait long, given up when the caller has something better to do.

A master's long-poll ``sync`` (``RoundBook.poll_wait``) waits at the Task Queue until its site has
runnable tasks; a completion that needs a round, a new worker or the pilot leaving must not wait
for it.  :func:`unless_woken` answers the call's result, or None as soon as ``wake`` is set; the
call then ends by itself (the master's next call ends the poll at the Task Queue) and its answer
or error is dropped.

Python 3.9, standard library only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


def _drop(future: asyncio.Future[Any]) -> None:
    """An abandoned call's end: its error is read (not logged as never retrieved)."""
    if not future.cancelled():
        future.exception()


async def unless_woken(call: Awaitable[T], wake: asyncio.Event) -> T | None:
    """``call``'s result, or None when ``wake`` is set first (it is cleared before the call and
    set again then: the caller's loop looks at what woke it)."""
    wake.clear()
    pending = asyncio.ensure_future(call)
    woken = asyncio.ensure_future(wake.wait())
    try:
        await asyncio.wait({pending, woken}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        woken.cancel()
    if pending.done():
        return pending.result()
    pending.add_done_callback(_drop)
    wake.set()
    return None
