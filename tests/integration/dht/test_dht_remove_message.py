"""Beyond the paper: withdrawing one value (REMOVE) and messages to one node (MESSAGE).

A pilot withdraws a file's location when the file leaves its cache, so that nobody is sent to a
copy that is gone; the master and its workers exchange assignments and completions as messages.
"""

from __future__ import annotations

from typing import Any

import pytest

from glidein_ext.dht.ids import key_id
from glidein_ext.errors import DhtError
from glidein_ext.testbed.dht_testnet import holders, network

LFN = "/store/w1/step0/f0001.dat"


async def test_a_withdrawn_value_is_gone_everywhere_and_others_stay() -> None:
    async with network(30, seed=21) as nodes:
        owner, other, reader = nodes[3], nodes[7], nodes[20]
        assert await owner.put(LFN, b"wn3 1 0a0b0c0d") == 3
        assert await other.put(LFN, b"wn7 1 0a0b0c0d") == 3
        assert sorted(await reader.get(LFN)) == [b"wn3 1 0a0b0c0d", b"wn7 1 0a0b0c0d"]
        # Another node cannot withdraw the owner's value, only its own.
        assert await other.remove(LFN, b"wn3 1 0a0b0c0d") == 0
        assert await owner.remove(LFN, b"wn3 1 0a0b0c0d") >= 3
        assert await reader.get(LFN) == [b"wn7 1 0a0b0c0d"]
        for node in holders(nodes, key_id(LFN)):
            assert [v.data for v in node.storage.get(key_id(LFN), 0.0)] == [b"wn7 1 0a0b0c0d"]
        # The owner no longer republishes it.
        await owner.republish(force=True)
        assert await reader.get(LFN) == [b"wn7 1 0a0b0c0d"]


async def test_messages_reach_the_topics_handler_and_come_back() -> None:
    async with network(5, seed=22) as nodes:
        master, worker = nodes[0], nodes[4]
        seen: list[tuple[Any, int]] = []

        def done(payload: Any, sender: int, _address: tuple[str, int]) -> Any:
            seen.append((payload, sender))
            return {"ok": True, "n": len(seen)}

        master.register_message("done", done)
        answer = await worker.message(master.address, "done", [12, 1, 0])
        assert answer == {"ok": True, "n": 1}
        assert seen == [([12, 1, 0], worker.id)]
        assert await worker.message(master.address, "unknown", 1) is None
        await master.close()
        with pytest.raises(DhtError, match="no answer"):
            await worker.message(master.address, "done", [13, 1, 0], timeout=0.2)
