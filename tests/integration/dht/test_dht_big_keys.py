"""A key holding more values than one datagram: split STOREs, paged gets.

320 values of 250 bytes are about 100 KB on the wire, more than one 65,000-byte datagram: a
republish, a LEAVE hand-off or a store of them all must be split, and a get must page through each
holder's values to return every one of them.
"""

from __future__ import annotations

import random

from glidein_ext.dht.ids import key_id
from glidein_ext.dht.node import DhtNode
from glidein_ext.dht.settings import DhtSettings
from glidein_ext.testbed.dht_testnet import holders, network

# 20 nodes share one event loop: on a loaded machine an answer may take a second or more.
BIG = DhtSettings(rpc_timeout=3.0, max_values_per_key=512, replication=3)
KEY = "/store/popular/dataset.root"
VALUES = [
    f"wn{i:04d}.site.example:/scratch/glidein/cache/".encode().ljust(250, b"x") for i in range(320)
]


def held(node: DhtNode) -> set[bytes]:
    return {v.data for v in node.storage.get(key_id(KEY), 0.0)}


async def put_one_by_one(nodes: list[DhtNode], owner: DhtNode | None = None) -> None:
    rng = random.Random(7)
    for value in VALUES:
        assert await (owner or rng.choice(nodes)).put(KEY, value, ttl=600) == 3


async def test_get_returns_every_value_of_a_key_larger_than_one_datagram() -> None:
    async with network(20, seed=51, settings=BIG) as nodes:
        await put_one_by_one(nodes)
        assert all(held(n) == set(VALUES) for n in holders(nodes, key_id(KEY)))
        for reader in (nodes[0], nodes[7], nodes[19]):
            got = await reader.get(KEY)
            assert len(got) == len(VALUES)
            assert sorted(got) == VALUES


async def test_put_many_splits_a_store_larger_than_one_datagram() -> None:
    async with network(20, seed=52, settings=BIG) as nodes:
        assert await nodes[3].put_many(KEY, VALUES, ttl=600) == 3
        assert [held(n) for n in holders(nodes, key_id(KEY))] == [set(VALUES)] * 3
        assert sorted(await nodes[11].get(KEY)) == VALUES


async def test_republish_and_leave_carry_a_key_larger_than_one_datagram() -> None:
    async with network(20, seed=53, settings=BIG) as nodes:
        owner = nodes[0]
        await put_one_by_one(nodes, owner)
        key = key_id(KEY)
        first = holders(nodes, key)
        before = {n.id: min(v.expires_at for v in n.storage.get(key, 0.0)) for n in first}
        # The owner republishes all its values of the key at once: split, with fresh lifetimes.
        assert await owner.republish() >= 1
        for node in first:
            assert held(node) == set(VALUES)
            assert min(v.expires_at for v in node.storage.get(key, 0.0)) > before[node.id]
        # A holder leaves: it hands the whole key on before saying LEAVE.
        leaver = next(n for n in first if n is not owner)
        live = [n for n in nodes if n is not leaver]
        await leaver.leave()
        now_holding = holders(live, key)
        assert len(now_holding) >= 3
        assert all(held(n) == set(VALUES) for n in now_holding)
        assert sorted(await live[5].get(KEY)) == VALUES
