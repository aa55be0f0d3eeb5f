"""A distributed site's long poll at the Task Queue (``tq.service.site_waits``), on one event
loop."""

from __future__ import annotations

import asyncio
import threading
import time

from glidein_ext.tq.service.site_waits import SiteWaits


def test_a_waiting_call_is_woken_by_queued_tasks_from_another_thread() -> None:
    async def scenario() -> tuple[bool, float]:
        waits = SiteWaits()
        number = waits.begin("S")
        waits.queued()  # nobody waits yet: nothing to wake, nothing kept
        start = time.monotonic()
        loop = asyncio.get_running_loop()
        loop.call_later(0.2, lambda: threading.Thread(target=waits.queued).start())
        woken = await waits.wait("S", number, 10.0, waits.generation)
        return woken, time.monotonic() - start

    woken, took = asyncio.run(scenario())
    assert woken and 0.15 < took < 5.0


def test_a_waiting_call_ends_when_its_time_is_up() -> None:
    async def scenario() -> tuple[bool, float, int]:
        waits = SiteWaits()
        start = time.monotonic()
        woken = await waits.wait("S", waits.begin("S"), 0.2, waits.generation)
        return woken, time.monotonic() - start, len(waits)

    woken, took, left = asyncio.run(scenario())
    assert not woken and took >= 0.19 and left == 0


def test_a_newer_call_of_the_site_ends_the_waiting_one_and_no_other() -> None:
    async def scenario() -> tuple[bool, bool, float]:
        waits = SiteWaits()
        first = asyncio.ensure_future(waits.wait("S", waits.begin("S"), 10.0, 0))
        other = asyncio.ensure_future(waits.wait("T", waits.begin("T"), 0.5, 0))
        await asyncio.sleep(0.1)
        start = time.monotonic()
        newer = waits.begin("S")  # the master's next call
        ended = await first
        took = time.monotonic() - start
        assert not await waits.wait("S", newer - 1, 1.0, 0)  # a superseded call never waits
        return ended, await other, took

    ended, other, took = asyncio.run(scenario())
    assert not ended and took < 1.0
    assert not other  # site T's call ran to its end: S's newer call is not T's


def test_tasks_queued_between_the_offers_read_and_the_wait_are_not_missed() -> None:
    async def scenario() -> tuple[bool, float]:
        waits = SiteWaits()
        number, seen = waits.begin("S"), waits.generation
        waits.queued()  # a submission's thread, after the call read the offers
        start = time.monotonic()
        woken = await waits.wait("S", number, 10.0, seen)
        return woken, time.monotonic() - start

    woken, took = asyncio.run(scenario())
    assert woken and took < 1.0
