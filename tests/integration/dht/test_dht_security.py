"""Authentication, replay protection and robustness against bad datagrams (beyond the paper)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import AsyncIterator
from typing import Any

from glidein_ext.dht import ids
from glidein_ext.dht.node import DhtNode
from glidein_ext.dht.protocol import Codec, Kind, WireValue
from glidein_ext.dht.settings import DhtSettings
from glidein_ext.testbed.dht_testnet import SITE_KEY, network


class Sniffer(asyncio.DatagramProtocol):
    """A bare UDP socket that records what it receives."""

    def __init__(self) -> None:
        self.received: list[bytes] = []

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.received.append(data)


@contextlib.asynccontextmanager
async def raw_socket() -> AsyncIterator[tuple[asyncio.DatagramTransport, Sniffer]]:
    """A bare UDP socket on 127.0.0.1 (its transport and its Sniffer), closed on leaving."""
    loop = asyncio.get_running_loop()
    transport, sniffer = await loop.create_datagram_endpoint(Sniffer, local_addr=("127.0.0.1", 0))
    try:
        yield transport, sniffer
    finally:
        transport.close()


def store_body(key: str, value: bytes, owner: int) -> list[Any]:
    return [ids.to_bytes(ids.key_id(key)), [WireValue(value, owner, 60.0).to_wire()]]


async def test_forged_messages_are_dropped_and_counted() -> None:
    async with network(5, seed=31) as nodes:
        target = nodes[0]
        intruder = DhtNode(
            b"not-the-site-key-but-long-enough", settings=DhtSettings(rpc_timeout=0.2)
        )
        await intruder.start("127.0.0.1", 0)
        try:
            assert await intruder.ping(target.address) is None
            intruder.table.observe(target.contact)
            for node in nodes[1:]:
                intruder.table.observe(node.contact)
            assert await intruder.put("evil", b"attacker:/f") == 1  # only its own copy
            assert all(ids.key_id("evil") not in n.storage for n in nodes)
            assert sum(n.stats.dropped_auth for n in nodes) >= 2
            assert all(intruder.id not in n.table for n in nodes)
        finally:
            await intruder.close()


async def test_replayed_and_stale_messages_are_dropped_and_counted() -> None:
    async with network(3, seed=32) as nodes:
        target = nodes[0]
        codec = Codec(SITE_KEY)
        async with raw_socket() as (transport, sniffer):
            sender = ids.random_id()
            datagram, _ = codec.encode(
                Kind.STORE, sender, store_body("a", b"v1", sender), timestamp=time.time()
            )
            transport.sendto(datagram, target.address)
            await asyncio.sleep(0.1)
            assert len(sniffer.received) == 1  # accepted and answered
            assert codec.decode(sniffer.received[0]).kind == Kind.STORE
            transport.sendto(datagram, target.address)  # the same datagram again
            stale, _ = codec.encode(
                Kind.STORE, sender, store_body("b", b"v2", sender), timestamp=time.time() - 600
            )
            transport.sendto(stale, target.address)
            future, _ = codec.encode(
                Kind.STORE, sender, store_body("c", b"v3", sender), timestamp=time.time() + 600
            )
            transport.sendto(future, target.address)
            await asyncio.sleep(0.1)
            assert len(sniffer.received) == 1
            assert target.stats.dropped_replay == 3
            assert ids.key_id("b") not in target.storage
            assert ids.key_id("c") not in target.storage
            # Its own response reflected back to it matches no request: dropped.
            transport.sendto(sniffer.received[0], target.address)
            await asyncio.sleep(0.05)
            assert target.stats.dropped_unexpected == 1


def random_value(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.randrange(9 if depth < 3 else 6)
    simple: list[Any] = [
        None,
        rng.choice([True, False]),
        rng.randint(-(2**63), 2**64 - 1),
        rng.random(),
        os.urandom(rng.choice([0, 1, 8, 16, 20, 21, 40])),
        "".join(rng.choice("ab:é") for _ in range(rng.randrange(5))),
    ]
    if choice < 6:
        return simple[choice]
    if choice < 8:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(9))]
    return {str(i): random_value(rng, depth + 1) for i in range(rng.randrange(4))}


def fuzz_datagrams(rng: random.Random, codec: Codec, count: int) -> list[bytes]:
    out = []
    for i in range(count):
        mode = i % 4
        if mode == 0:  # noise
            out.append(os.urandom(rng.randrange(1, 200)))
        elif mode == 1:  # signed, random body, every kind, request or response
            kind = rng.choice(list(Kind))
            body = [random_value(rng) for _ in range(rng.randrange(9))]
            reply_to = os.urandom(8) if rng.random() < 0.3 else None
            datagram, _ = codec.encode(
                kind,
                ids.random_id(),
                body,
                timestamp=time.time(),
                response=reply_to is not None,
                reply_to=reply_to,
            )
            out.append(datagram)
        elif mode == 2:  # signed, plausible body with one field mangled
            sender = ids.random_id()
            body = store_body("x", b"y", sender)
            body[rng.randrange(2)] = random_value(rng)
            datagram, _ = codec.encode(Kind.STORE, sender, body, timestamp=time.time())
            out.append(datagram)
        else:  # truncated or bit-flipped valid datagram
            datagram, _ = codec.encode(Kind.PING, ids.random_id(), [], timestamp=time.time())
            cut = bytearray(datagram[: rng.randrange(1, len(datagram) + 1)])
            cut[rng.randrange(len(cut))] ^= 1 << rng.randrange(8)
            out.append(bytes(cut))
    return out


async def test_bad_datagrams_never_crash_a_node() -> None:
    async with network(6, seed=33) as nodes:
        target = nodes[0]
        async with raw_socket() as (transport, _):
            datagrams = fuzz_datagrams(random.Random(33), Codec(SITE_KEY), 2000)
            for i, datagram in enumerate(datagrams):
                transport.sendto(datagram, target.address)
                if i % 50 == 0:
                    await asyncio.sleep(0.005)
            await asyncio.sleep(0.2)
        stats = target.stats
        assert stats.handler_errors == 0  # every malformed body was recognised as such
        assert stats.dropped_auth >= 500
        assert stats.dropped_malformed >= 300
        assert stats.dropped_unexpected >= 1  # responses to nothing we asked
        # Still serving: it answers a lookup and a put/get through the network.
        assert await nodes[1].ping(target.address) is not None
        await nodes[2].put("after-fuzz", b"ok")
        assert await target.get("after-fuzz") == [b"ok"]


async def test_a_message_claiming_our_own_id_is_dropped() -> None:
    async with network(2, seed=34) as nodes:
        target = nodes[0]
        async with raw_socket() as (transport, sniffer):
            datagram, _ = Codec(SITE_KEY).encode(Kind.PING, target.id, [], timestamp=time.time())
            transport.sendto(datagram, target.address)
            await asyncio.sleep(0.05)
        assert sniffer.received == []
        assert target.stats.dropped_malformed == 1
