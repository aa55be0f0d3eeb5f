"""The maintenance loop outlives a failing pass; every task has an owner."""

from __future__ import annotations

import asyncio
import logging

import pytest

from glidein_ext.dht.settings import DhtSettings
from glidein_ext.testbed.dht_testnet import network

QUICK = DhtSettings(rpc_timeout=0.3, republish_interval=0.05)


def other_tasks() -> set[asyncio.Task[object]]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}


async def test_maintenance_loop_survives_a_failing_pass(caplog: pytest.LogCaptureFixture) -> None:
    passes = 0
    with caplog.at_level(logging.ERROR, logger="glidein_ext.dht"):
        async with network(3, seed=61, settings=QUICK) as nodes:
            node = nodes[0]
            again = asyncio.Event()

            async def failing_then_fine(force: bool = False) -> int:
                nonlocal passes
                passes += 1
                if passes == 1:
                    raise RuntimeError("injected failure of a maintenance pass")
                again.set()
                return 0

            node.republish = failing_then_fine  # type: ignore[method-assign]
            await asyncio.wait_for(again.wait(), timeout=10)
            await node.put("still/working", b"yes")
            assert await nodes[2].get("still/working") == [b"yes"]
        # Closing the nodes cancelled and awaited every task they had started.
        assert not other_tasks()
    assert passes >= 2
    failures = [r for r in caplog.records if "maintenance pass failed" in r.getMessage()]
    assert len(failures) == 1
    assert failures[0].exc_info is not None
    assert "injected failure" in str(failures[0].exc_info[1])
