"""Departures: a node that leaves with LEAVE, and one that is killed without it (Delgado Peris 2014
§III.A)."""

from __future__ import annotations

import random

from glidein_ext.dht.ids import key_id
from glidein_ext.dht.node import DhtNode
from glidein_ext.testbed.dht_testnet import holders, network

KEYS = [f"/store/run1/file{i}" for i in range(10)]


async def put_all(nodes: list[DhtNode]) -> None:
    for i, key in enumerate(KEYS):
        assert await nodes[i].put(key, f"pilot{i}".encode()) == 3


async def assert_all_found(nodes: list[DhtNode], rng: random.Random) -> None:
    for i, key in enumerate(KEYS):
        assert await rng.choice(nodes).get(key) == [f"pilot{i}".encode()], key


async def test_leaving_nodes_hand_their_keys_on_and_are_dropped_at_once() -> None:
    async with network(40, seed=11) as nodes:
        await put_all(nodes)
        live = list(nodes)
        # Every original holder of the first key leaves, one after the other.
        for leaver in holders(live, key_id(KEYS[0])):
            told = [n for n in live if n.id in leaver.table]
            live.remove(leaver)
            await leaver.leave()
            assert told and all(leaver.id not in n.table for n in told)
            # The keys it held are at the replication factor again.
            for key in KEYS:
                assert len(holders(live, key_id(key))) >= 3
        await assert_all_found(live, random.Random(11))


async def test_killed_nodes_keys_are_still_found() -> None:
    async with network(40, seed=12) as nodes:
        await put_all(nodes)
        first = holders(nodes, key_id(KEYS[0]))
        victim = first[0]
        await victim.close()  # killed: no LEAVE, no republish
        live = [n for n in nodes if n is not victim]
        await assert_all_found(live, random.Random(12))
        # After the hourly republish of the survivors, the other original holders die too.
        for node in live:
            await node.republish(force=True)
        for node in first[1:]:
            await node.close()
        live = [n for n in live if n not in first]
        assert len(holders(live, key_id(KEYS[0]))) >= 1
        await assert_all_found(live, random.Random(13))
