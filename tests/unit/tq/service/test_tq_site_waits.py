"""A distributed site's long poll at the Task Queue (``tq.service.site_waits``), on one event
loop.  What ends a wait is told by its answer and by the loop's turns, not by a wall-clock bound:
a wait that should end on an event is given an hour, so it cannot have ended by its time."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from glidein_ext.tq.service.site_waits import SiteWaits

HOUR = 3600.0  # a wait's time that no test outlives: one that ends did so on an event


async def _ends_within_turns(waiting: asyncio.Future[Any], turns: int = 10) -> bool:
    """``waiting`` is done within ``turns`` turns of the event loop (no time passes)."""
    for _ in range(turns):
        if waiting.done():
            return True
        await asyncio.sleep(0)
    return waiting.done()


def test_a_waiting_call_is_woken_by_queued_tasks_from_another_thread() -> None:
    async def scenario() -> tuple[bool, float]:
        waits = SiteWaits()
        number = waits.begin("S")
        waits.queued()  # nobody waits yet: nothing to wake, nothing kept
        start = time.monotonic()
        loop = asyncio.get_running_loop()
        loop.call_later(0.2, lambda: threading.Thread(target=waits.queued).start())
        woken = await waits.wait("S", number, HOUR, waits.generation)
        return woken, time.monotonic() - start

    woken, took = asyncio.run(scenario())
    assert woken and took > 0.15  # woken by the thread's tasks, not before them


def test_a_waiting_call_ends_when_its_time_is_up() -> None:
    async def scenario() -> tuple[bool, float, int]:
        waits = SiteWaits()
        start = time.monotonic()
        woken = await waits.wait("S", waits.begin("S"), 0.2, waits.generation)
        return woken, time.monotonic() - start, len(waits)

    woken, took, left = asyncio.run(scenario())
    assert not woken and took >= 0.19 and left == 0


def test_a_newer_call_of_the_site_ends_the_waiting_one_and_no_other() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        waits = SiteWaits()
        first = asyncio.ensure_future(waits.wait("S", waits.begin("S"), HOUR, 0))
        other = asyncio.ensure_future(waits.wait("T", waits.begin("T"), 0.5, 0))
        await asyncio.sleep(0)  # one turn: both calls wait
        assert len(waits) == 2
        newer = waits.begin("S")  # the master's next call
        at_once = await _ends_within_turns(first)
        ended = await first
        assert not await waits.wait("S", newer - 1, 1.0, 0)  # a superseded call never waits
        return ended, await other, at_once

    ended, other, at_once = asyncio.run(scenario())
    assert not ended and at_once
    assert not other  # site T's call ran to its end: S's newer call is not T's


def test_tasks_queued_between_the_offers_read_and_the_wait_are_not_missed() -> None:
    async def scenario() -> tuple[bool, bool]:
        waits = SiteWaits()
        number, seen = waits.begin("S"), waits.generation
        waits.queued()  # a submission's thread, after the call read the offers
        waiting = asyncio.ensure_future(waits.wait("S", number, HOUR, seen))
        at_once = await _ends_within_turns(waiting)
        return await waiting, at_once

    woken, at_once = asyncio.run(scenario())
    assert woken and at_once
