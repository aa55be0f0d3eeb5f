"""Broadcast with aggregation on real networks (Delgado Peris 2014 §III.B)."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from glidein_ext.dht.broadcaster import BroadcastResult
from glidein_ext.dht.contact import Address, Contact
from glidein_ext.dht.node import DhtNode
from glidein_ext.dht.protocol import Kind, Message, parse_broadcast
from glidein_ext.errors import DhtError
from glidein_ext.testbed.dht_testnet import network


def register_sum(nodes: list[DhtNode]) -> dict[int, int]:
    """Each node answers a distinct number times the payload's scale; returns id -> number."""
    answers = {}
    for i, node in enumerate(nodes):
        answers[node.id] = 1000 + i

        def answer(payload: dict[str, int], number: int = 1000 + i) -> int:
            return number * payload["scale"]

        node.register_broadcast("sum", answer, sum)
    return answers


def merge(parts: list[dict[str, int]]) -> dict[str, int]:
    return {k: v for part in parts for k, v in part.items()}


async def test_broadcast_reaches_every_node_once_with_n_minus_1_messages() -> None:
    async with network(120, seed=21) as nodes:
        answers = register_sum(nodes)
        for round_ in (1, 2):
            for node in nodes:
                node.stats.broadcasts_forwarded = 0
                node.stats.broadcast_duplicates = 0
                node.stats.rpc_timeouts = 0
            result = await nodes[round_].broadcast("sum", {"scale": round_}, timeout=5)
            assert result.value == round_ * sum(answers.values())
            assert result.complete
            assert {n.stats.broadcasts_handled for n in nodes} == {round_}
            # One message per node reached -- unless an ack timed out (a machine so loaded
            # that a live node did not answer in time): its parent then covers the node's
            # region again, and some nodes hear the broadcast twice (and handle it once).
            if sum(n.stats.rpc_timeouts for n in nodes) == 0:
                assert sum(n.stats.broadcasts_forwarded for n in nodes) == len(nodes) - 1
                assert sum(n.stats.broadcast_duplicates for n in nodes) == 0


async def test_broadcast_with_ten_percent_killed_returns_the_live_answers_in_time() -> None:
    async with network(100, seed=22) as nodes:
        answers = register_sum(nodes)
        rng = random.Random(22)
        killed = rng.sample(nodes[1:], 10)
        for node in killed:
            await node.close()
        live = [n for n in nodes if n not in killed]
        started = time.monotonic()
        result = await nodes[0].broadcast("sum", {"scale": 1}, timeout=4)
        assert time.monotonic() - started < 4.5
        assert result.value == sum(answers[n.id] for n in live)
        assert {n.stats.broadcasts_handled for n in live} == {1}


async def _slow_child(reply_comes: bool) -> tuple[BroadcastResult, int, int]:
    """A broadcast whose root does not hear one child's acknowledgement in time (a loaded machine,
    or the datagram lost) although the child handled the message and its whole region heard it
    from the child; the child's reply comes 0.5 s later, or never.  The result, the sum of every
    node's answer, and that of the child's region."""
    async with network(60, seed=25) as nodes:
        answers = register_sum(nodes)
        root = nodes[0]
        by_id = {n.id: n for n in nodes}
        broadcaster = root._broadcaster
        forward = broadcaster._request
        region: list[DhtNode] = []

        async def request(contact: Contact, kind: Kind, body: list[object]) -> Message | None:
            inside = [n for n in nodes if n.id in parse_broadcast(body).block]
            if kind != Kind.BROADCAST or region or len(inside) < 3:
                return await forward(contact, kind, body)
            region.extend(inside)  # a region with nodes besides the child
            child = by_id[contact.id]._broadcaster
            notify = child._notify

            def slow(address: Address, kind: Kind, body: list[object]) -> None:
                if reply_comes:
                    asyncio.get_running_loop().call_later(0.5, notify, address, kind, body)

            child._notify = slow
            await forward(contact, kind, body)
            for _ in range(200):  # the child reached its region before we cover it again
                if all(n.stats.broadcasts_handled for n in inside):
                    break
                await asyncio.sleep(0.01)
            return None  # the acknowledgement "timed out"

        broadcaster._request = request
        result = await root.broadcast("sum", {"scale": 1}, timeout=3)
        assert region
        # The root covered the region again: the nodes it sent it to had the message already.
        assert {n.stats.broadcasts_handled for n in nodes} == {1}
        assert sum(n.stats.broadcast_duplicates for n in region) >= 1
        return result, sum(answers.values()), sum(answers[n.id] for n in region)


async def test_a_child_given_up_as_dead_that_was_only_slow_still_counts() -> None:
    result, total, _ = await _slow_child(reply_comes=True)
    assert result.value == total  # its late reply brought its region's answers
    assert result.complete
    assert result.elapsed < 2.5  # the root waited for the reply, not for its timeout


async def test_a_given_up_child_whose_reply_never_comes_makes_the_answer_partial() -> None:
    result, total, lost = await _slow_child(reply_comes=False)
    assert result.value == total - lost
    assert not result.complete  # the region's nodes answered the child: the root says so


async def test_slow_answers_time_out_and_the_root_returns_what_it_has() -> None:
    async with network(30, seed=23) as nodes:
        answers = register_sum(nodes)
        slow = nodes[7]
        answered = asyncio.Event()

        async def too_slow(payload: object) -> int:
            await asyncio.sleep(2)
            answered.set()
            return 1

        slow.register_broadcast("sum", too_slow, sum)
        started = time.monotonic()
        result = await nodes[0].broadcast("sum", {"scale": 1}, timeout=1)
        assert time.monotonic() - started < 1.3  # the slow node's parents gave up in time
        assert not answered.is_set()
        assert result.value == sum(answers.values()) - answers[slow.id]
        assert not result.complete
        await answered.wait()
        await asyncio.sleep(0.01)
        assert slow.stats.broadcast_late_replies == 1  # its answer came too late: dropped


async def test_async_answers_and_nodes_without_the_topic() -> None:
    async with network(25, seed=24) as nodes:
        for node in nodes[:20]:

            async def answer(payload: object, ident: int = node.id) -> dict[str, int]:
                await asyncio.sleep(0.01)
                return {format(ident, "x"): 1}

            node.register_broadcast("who", answer, merge)
        result = await nodes[0].broadcast("who", None, timeout=3)
        # Nodes 20-24 have no handler: they forward, and pass their subtrees' parts up.
        assert set(result.value) == {format(n.id, "x") for n in nodes[:20]}
        assert result.complete
        assert {n.stats.broadcasts_handled for n in nodes} == {1}
        # A root without the topic gets the uncombined parts.
        parts = await nodes[24].broadcast("who", None, timeout=3)
        assert isinstance(parts.value, list)
        assert merge(parts.value) == result.value


async def test_a_payload_that_cannot_travel_is_refused_at_the_root() -> None:
    async with network(3, seed=25) as nodes:
        for payload, message in ((b"x" * 70_000, "does not fit"), ({1, 2}, "cannot travel")):
            with pytest.raises(DhtError, match=message):
                await nodes[0].broadcast("who", payload, timeout=1)
        assert sum(n.stats.broadcasts_forwarded for n in nodes) == 0
