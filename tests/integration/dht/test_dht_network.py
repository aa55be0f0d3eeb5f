"""Real networks on 127.0.0.1: every get after a set, append, read-only clients, republish."""

from __future__ import annotations

import asyncio
import random

import pytest

from glidein_ext.dht.ids import key_id
from glidein_ext.dht.node import DhtNode
from glidein_ext.errors import DhtError
from glidein_ext.testbed.dht_testnet import FAST, SITE_KEY, holders, network


async def put_then_get_everything(nodes: list[DhtNode], keys: int, rng: random.Random) -> None:
    for i in range(keys):
        stored = await rng.choice(nodes).put(f"/store/file{i}.root", f"node{i}:/cache".encode())
        assert stored == 3
    for i in range(keys):
        reader = rng.choice(nodes)
        assert await reader.get(f"/store/file{i}.root") == [f"node{i}:/cache".encode()]


async def test_fifty_nodes_answer_every_get_after_a_set() -> None:
    async with network(50, seed=1) as nodes:
        await put_then_get_everything(nodes, 50, random.Random(1))
        # Each key is held by exactly the replication factor's number of nodes.
        assert all(len(holders(nodes, key_id(f"/store/file{i}.root"))) == 3 for i in range(50))


async def test_two_hundred_nodes_sets_gets_and_broadcast() -> None:
    async with network(200, seed=2) as nodes:
        await put_then_get_everything(nodes, 100, random.Random(2))
        for node in nodes:
            node.register_broadcast("count", lambda payload: 1, sum)
        # 200 nodes share this one event loop: a budget that a loaded machine cannot exhaust.
        for node in nodes:
            node.stats.rpc_timeouts = 0
        result = await nodes[17].broadcast("count", None, timeout=60)
        assert result.value == 200
        assert result.complete
        assert {n.stats.broadcasts_handled for n in nodes} == {1}
        # N-1 messages -- unless an acknowledgement timed out on a loaded machine: the
        # parent then covers that child's region again (its nodes still answer once).
        if sum(n.stats.rpc_timeouts for n in nodes) == 0:
            assert sum(n.stats.broadcasts_forwarded for n in nodes) == 199


async def test_store_appends_replicas_of_one_file() -> None:
    async with network(30, seed=3) as nodes:
        await nodes[1].put("dataset/file", b"site-a:/f")
        await nodes[2].put("dataset/file", b"site-b:/f")
        await nodes[3].put("dataset/file", b"site-a:/f")  # deduplicated
        for reader in (nodes[0], nodes[29]):
            assert sorted(await reader.get("dataset/file")) == [b"site-a:/f", b"site-b:/f"]
        assert await nodes[4].get("no/such/file") == []


async def test_read_only_client_uses_the_network_without_joining_it() -> None:
    async with (
        network(20, seed=4) as nodes,
        DhtNode(SITE_KEY, settings=FAST, read_only=True) as client,
    ):
        await client.start("127.0.0.1", 0)
        assert await client.join([nodes[5].address]) == 1
        assert await client.put("k", b"v") == 3
        assert await client.get("k") == [b"v"]
        assert all(client.id not in node.table for node in nodes)
        assert len(client.storage) == 0


async def test_owner_republishes_with_a_fresh_lifetime_until_withdrawn() -> None:
    async with network(20, seed=5) as nodes:
        owner = nodes[0]
        await owner.put("short-lived", b"here", ttl=30)
        key = key_id("short-lived")
        before = {n.id: n.storage.get(key, 0.0)[0].expires_at for n in holders(nodes, key)}
        await asyncio.sleep(0.05)
        await owner.republish()
        after = {n.id: n.storage.get(key, 0.0)[0].expires_at for n in holders(nodes, key)}
        assert all(after[i] > before[i] for i in before)
        assert owner.withdraw("short-lived", b"here")
        assert not owner.withdraw("short-lived", b"here")
        await owner.republish()
        again = {n.id: n.storage.get(key, 0.0)[0].expires_at for n in holders(nodes, key)}
        assert again == after


async def test_join_fails_cleanly_without_an_answering_contact() -> None:
    async with DhtNode(SITE_KEY) as lonely:
        await lonely.start("127.0.0.1", 0)
        probe = DhtNode(SITE_KEY)
        port = (await probe.start("127.0.0.1", 0))[1]
        await probe.close()  # nothing listens there any more
        with pytest.raises(DhtError, match="no DHT contact answered"):
            await lonely.join([("127.0.0.1", port)])
