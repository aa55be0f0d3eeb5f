"""A local DHT network for tests and benchmarks: real nodes on 127.0.0.1, one event loop."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from glidein_ext.dht.ids import ID_BITS
from glidein_ext.dht.node import DhtNode
from glidein_ext.dht.settings import DhtSettings

SITE_KEY = b"integration-test-site-key-0123456789"
FAST = DhtSettings(rpc_timeout=0.3, replication=3, sweep_rate=64.0)
"""Short timeouts; three replicas (what the tests count) and sweeps at full speed (small
networks)."""


async def start_nodes(
    n: int, *, seed: int, settings: DhtSettings = FAST, key: bytes = SITE_KEY
) -> list[DhtNode]:
    """``n`` nodes, each joining through a random earlier one (as the Task Queue would hand out)."""
    rng = random.Random(seed)
    nodes: list[DhtNode] = []
    try:
        for _ in range(n):
            node = DhtNode(key, node_id=rng.getrandbits(ID_BITS), settings=settings, rng=rng)
            nodes.append(node)
            await node.start("127.0.0.1", 0)
            if len(nodes) > 1:
                await node.join([rng.choice(nodes[:-1]).address])
    except BaseException:
        await stop_nodes(nodes)
        raise
    return nodes


async def stop_nodes(nodes: list[DhtNode]) -> None:
    for node in nodes:
        await node.close()


@asynccontextmanager
async def network(
    n: int, *, seed: int, settings: DhtSettings = FAST, key: bytes = SITE_KEY
) -> AsyncIterator[list[DhtNode]]:
    nodes = await start_nodes(n, seed=seed, settings=settings, key=key)
    try:
        yield nodes
    finally:
        await stop_nodes(nodes)


def holders(nodes: list[DhtNode], key_id: int) -> list[DhtNode]:
    """The live nodes that store ``key_id``."""
    return [node for node in nodes if key_id in node.storage]
