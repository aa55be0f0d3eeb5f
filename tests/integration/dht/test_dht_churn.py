"""Joining (Kademlia section 2.3) and churn without LEAVE on real networks."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace

from glidein_ext.dht.ids import ID_BITS, bucket_index
from glidein_ext.dht.node import DhtNode
from glidein_ext.dht.protocol import BroadcastRequest, Kind
from glidein_ext.dht.regions import Block
from glidein_ext.testbed.dht_testnet import FAST, SITE_KEY, network

SMALL_K = replace(FAST, k=6, rpc_timeout=2.0)
"""Buckets of 6: a 60-node network then has several buckets beyond a node's k closest.  A
timeout that a loaded machine does not reach: a missed answer would change what the join does."""


async def test_a_join_fills_every_occupied_bucket_and_costs_a_bounded_number_of_requests() -> None:
    async with network(60, seed=31, settings=SMALL_K) as nodes:
        rng = random.Random(1031)  # not the network's seed: another id
        newcomer = DhtNode(SITE_KEY, node_id=rng.getrandbits(ID_BITS), settings=SMALL_K, rng=rng)
        await newcomer.start("127.0.0.1", 0, maintenance=False)
        try:
            assert await newcomer.join([nodes[0].address]) == 1
            requests = newcomer.stats.sent
            others = sorted((n.id for n in nodes), key=lambda i: i ^ newcomer.id)
            kth = bucket_index(newcomer.id, others[SMALL_K.k - 1])
            for index in range(ID_BITS):
                in_range = [i for i in others if bucket_index(newcomer.id, i) == index]
                held = newcomer.table.bucket_size(index)
                if index < kth:
                    # Below the k-th closest node the self-lookup met every node.
                    assert held == len(in_range), index
                else:
                    assert held >= min(SMALL_K.join_fill, len(in_range)), index
            # A PING, the self-lookup (about k requests), and at most two rounds per bucket
            # beyond the k-th closest node; a full lookup in each (what a join cost before:
            # 53 requests here) does not fit.
            far_buckets = ID_BITS - kth
            assert requests <= 1 + 2 * SMALL_K.k + far_buckets * 2 * SMALL_K.alpha
        finally:
            await newcomer.close()


async def test_gets_and_a_broadcast_survive_a_tenth_killed_without_leave() -> None:
    async with network(30, seed=32) as nodes:
        rng = random.Random(32)
        keys = [f"/store/churn/{i}" for i in range(30)]
        for key in keys:
            assert await rng.choice(nodes).put(key, key.encode()) == 3
        killed = rng.sample(nodes[1:], 3)
        for node in killed:
            await node.close()  # no LEAVE: what a SIGKILLed pilot looks like to the others
        live = [n for n in nodes if n not in killed]
        for key in keys:
            assert await rng.choice(live).get(key) == [key.encode()], key
        for node in live:
            node.register_broadcast("count", lambda payload: 1, sum)
            node.stats.broadcasts_handled = 0
        result = await nodes[0].broadcast("count", None, timeout=10)
        assert result.value == len(live)
        assert result.complete
        assert {n.stats.broadcasts_handled for n in live} == {1}


async def test_a_broadcast_is_not_forwarded_to_the_nodes_it_names_to_avoid() -> None:
    async with network(30, seed=33) as nodes:
        for node in nodes:
            node.register_broadcast("count", lambda payload: 1, sum)
        sender, receiver, avoided = nodes[0], nodes[1], nodes[2]
        request = BroadcastRequest(
            b"avoid-test-bid-1", "count", None, Block.whole(), 2.0, 0, (avoided.id,)
        )
        ack = await sender._rpc.request(receiver.address, Kind.BROADCAST, request.to_wire(), 2.0)
        assert ack.body == [True]
        for _ in range(200):
            if sum(n.stats.broadcasts_handled for n in nodes) >= len(nodes) - 1:
                break
            await asyncio.sleep(0.01)
        assert avoided.stats.broadcasts_handled == 0
        assert {n.stats.broadcasts_handled for n in nodes if n is not avoided} == {1}
