"""Broadcast with aggregation over the DHT: the asyncio side (Delgado Peris 2014, section III.B).

A node that receives BROADCAST handles it once (later copies are acknowledged as duplicates and
dropped), splits its range with :func:`regions.plan`, forwards the message to one contact per
region, answers with the caller-given handler of the topic, and keeps an :class:`Aggregation` with
a pointer to its parent.  It sends the aggregated reply up when every expected reply is in or when
its depth-dependent budget runs out.  Forwards are acknowledged at once; a child that does not
acknowledge is taken as dead, our contacts closest to it are asked for its live neighbours, and
its region is planned again without it (beyond the paper), so a broadcast with dead nodes still
reaches the live ones.  Such a child may only have been slow: its reply is still taken while the
table is open, and a subtree whose nodes went to a child that never replied is not whole
(``aggregation``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Optional

from glidein_ext.dht import regions, wire
from glidein_ext.dht.aggregation import Aggregation, Combine, child_budget
from glidein_ext.dht.contact import Address, Contact
from glidein_ext.dht.protocol import (
    BODY_BUDGET,
    MAX_AVOID,
    BroadcastRequest,
    Kind,
    Message,
    ProtocolError,
    parse_flag,
)
from glidein_ext.dht.routing import RoutingTable
from glidein_ext.dht.rpc import NodeStats
from glidein_ext.dht.settings import DhtSettings
from glidein_ext.errors import DhtError

log = logging.getLogger(__name__)

Answer = Callable[[Any], Any]
"""A topic's handler: the payload in, this node's answer out (a value or an awaitable of one)."""
Request = Callable[[Contact, Kind, list[Any]], Awaitable[Optional[Message]]]
Notify = Callable[[Address, Kind, list[Any]], None]
Spawn = Callable[[Coroutine[Any, Any, None]], None]
Discover = Callable[[int, set[int]], Awaitable[list[Contact]]]
"""Contacts near an id (learned from our contacts closest to it), leaving out the given ids."""


@dataclass(frozen=True)
class Topic:
    answer: Answer
    combine: Combine


@dataclass(frozen=True)
class BroadcastResult:
    """What the root gets back: the aggregated answer, and whether every node it reached
    answered in time (``complete``)."""

    value: Any
    complete: bool
    elapsed: float


@dataclass
class _Active:
    request: BroadcastRequest
    aggregation: Aggregation
    parent: Address | None
    deadline: float
    failed: set[int] = field(default_factory=set)
    timer: asyncio.TimerHandle | None = None
    result: asyncio.Future[tuple[Any, bool]] | None = None


class Broadcaster:
    """The broadcasts in flight at one node."""

    def __init__(
        self,
        own_id: int,
        table: RoutingTable,
        settings: DhtSettings,
        stats: NodeStats,
        *,
        request: Request,
        notify: Notify,
        spawn: Spawn,
        discover: Discover,
    ) -> None:
        self._own_id = own_id
        self._table = table
        self._settings = settings
        self._stats = stats
        self._request = request
        self._notify = notify
        self._spawn = spawn
        self._discover = discover
        self._topics: dict[str, Topic] = {}
        self._active: dict[bytes, _Active] = {}
        self._seen: OrderedDict[bytes, float] = OrderedDict()

    def register(self, topic: str, answer: Answer, combine: Combine) -> None:
        self._topics[topic] = Topic(answer, combine)

    async def start(self, topic: str, payload: Any, timeout: float) -> BroadcastResult:
        """Broadcast from this node (the root) and wait for the aggregated answer.

        Raises DhtError when the payload cannot travel or does not fit in one datagram.
        """
        started = time.monotonic()
        request = BroadcastRequest(
            bid=os.urandom(16),
            topic=topic,
            payload=payload,
            block=regions.Block.whole(),
            budget=timeout,
            depth=0,
        )
        size = len(wire.encode(request.to_wire()))  # raises DhtError for what cannot travel
        if size > BODY_BUDGET:
            raise DhtError(f"a broadcast of {size} bytes does not fit in one datagram")
        future: asyncio.Future[tuple[Any, bool]] = asyncio.get_running_loop().create_future()
        self._handle(request, None, future)
        value, complete = await future
        return BroadcastResult(value, complete, time.monotonic() - started)

    def on_request(self, request: BroadcastRequest, parent: Address) -> bool:
        """A BROADCAST from ``parent``; False when we already had it.

        Raises ProtocolError for a range that does not contain us: it was meant for a node that
        is gone and whose address we now have.
        """
        if self._own_id not in request.block:
            raise ProtocolError("a broadcast range that does not contain the receiver")
        if request.bid in self._seen:
            self._stats.broadcast_duplicates += 1
            return False
        self._handle(request, parent, None)
        return True

    def on_reply(self, child: int, bid: bytes, value: Any, complete: bool, merged: bool) -> None:
        """A BROADCAST_REPLY: one child's aggregated subtree."""
        state = self._active.get(bid)
        if state is None or not state.aggregation.reply(child, value, complete, merged):
            self._stats.broadcast_late_replies += 1
            return
        self._maybe_finish(bid, state)

    def close(self) -> None:
        for bid in list(self._active):
            self._finish(bid)

    # --- internals -----------------------------------------------------------------------------

    def _handle(
        self,
        request: BroadcastRequest,
        parent: Address | None,
        result: asyncio.Future[tuple[Any, bool]] | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        self._remember(request.bid)
        self._stats.broadcasts_handled += 1
        topic = self._topics.get(request.topic)
        state = _Active(
            request=request,
            aggregation=Aggregation(topic.combine if topic else None, topic is not None),
            parent=parent,
            deadline=loop.time() + request.budget,
            result=result,
        )
        self._active[request.bid] = state
        state.timer = loop.call_later(request.budget, self._finish, request.bid)
        delegations = regions.plan(
            self._own_id,
            request.block,
            self._table.contacts(),
            request.avoid,
            self._settings.region_bits,
        )
        self._forward_all(state, delegations)
        if topic is not None:
            self._answer(state, topic)
        self._maybe_finish(request.bid, state)

    def _answer(self, state: _Active, topic: Topic) -> None:
        try:
            value = topic.answer(state.request.payload)
        except Exception:  # contract: the caller's handler never breaks the broadcast (logged)
            log.exception("broadcast handler for %r failed", state.request.topic)
            value = None
        if inspect.isawaitable(value):
            self._spawn(self._await_answer(state, value))
        else:
            state.aggregation.own_answer(value)

    async def _await_answer(self, state: _Active, pending: Awaitable[Any]) -> None:
        try:
            value = await pending
        except Exception:  # contract: the caller's handler never breaks the broadcast (logged)
            log.exception("broadcast handler for %r failed", state.request.topic)
            value = None
        if state.aggregation.finished:
            self._stats.broadcast_late_replies += 1  # our own answer missed our deadline
            return
        state.aggregation.own_answer(value)
        self._maybe_finish(state.request.bid, state)

    def _forward_all(
        self,
        state: _Active,
        delegations: list[regions.Delegation],
        given_up: tuple[int, ...] = (),
    ) -> None:
        """Forward to one contact per delegation; ``given_up``: the children (and their own
        given-up ancestors in this table) whose regions these delegations cover again."""
        for delegation in delegations:
            state.aggregation.expect(delegation.contact.id)
            self._spawn(self._forward(state, delegation, given_up))

    async def _forward(
        self, state: _Active, delegation: regions.Delegation, given_up: tuple[int, ...]
    ) -> None:
        request = state.request
        contact = delegation.contact
        remaining = state.deadline - asyncio.get_running_loop().time()
        avoid = dict.fromkeys(request.avoid)
        avoid.update(dict.fromkeys(i for i in state.failed if i in delegation.block))
        child = BroadcastRequest(
            bid=request.bid,
            topic=request.topic,
            payload=request.payload,
            block=delegation.block,
            budget=max(0.001, child_budget(remaining, self._settings.broadcast_hop_margin)),
            depth=request.depth + 1,
            avoid=tuple(i for i in avoid if i in delegation.block)[:MAX_AVOID],
        )
        self._stats.broadcasts_forwarded += 1
        ack = await self._request(contact, Kind.BROADCAST, child.to_wire())
        if state.aggregation.finished:
            return
        if ack is not None:
            try:
                fresh = parse_flag(ack.body)
            except ProtocolError:
                fresh = False
                log.debug("malformed broadcast ack from %s", contact)
            if not fresh:  # it had the message already: its reply goes to another parent
                state.aggregation.forget(contact.id)
                for slow in given_up:  # perhaps to a given-up child that was only slow
                    state.aggregation.stale(slow)
        else:
            # The child is dead, or too slow to acknowledge.  Its region is covered again with
            # the contacts we have left there (each new child is told to avoid the failed ones:
            # its table may still hold them); when it was the only node we knew there, our
            # contacts closest to it are first asked for its neighbours.  It stays expected until
            # then, so that the table of replies cannot look complete in between; then it is
            # given up (its reply, should it come, still counts).
            state.failed.add(contact.id)
            skip = {*state.failed, *request.avoid, self._own_id}
            known = [c for c in self._table.contacts() if c.id not in skip]
            again = regions.plan_foreign(delegation.block, known, skip, self._settings.region_bits)
            if not again:
                found = await self._discover(contact.id, skip)
                if state.aggregation.finished:
                    return
                again = regions.plan_foreign(
                    delegation.block, found, skip, self._settings.region_bits
                )
            self._forward_all(state, again, (*given_up, contact.id))
            state.aggregation.give_up(contact.id)
        self._maybe_finish(request.bid, state)

    def _maybe_finish(self, bid: bytes, state: _Active) -> None:
        if state.aggregation.complete and not state.aggregation.finished:
            self._finish(bid)

    def _finish(self, bid: bytes) -> None:
        state = self._active.pop(bid, None)
        if state is None:
            return
        if state.timer is not None:
            state.timer.cancel()
        complete = state.aggregation.whole
        try:
            value = state.aggregation.finish()
        except Exception:  # contract: the caller's combine never breaks the broadcast (logged)
            log.exception("combining answers for %r failed", state.request.topic)
            value = None
        self._stats.broadcast_late_replies += state.aggregation.late
        if state.result is not None:
            if not state.result.done():
                state.result.set_result((value, complete))
        elif state.parent is not None:
            try:
                body = [bid, value, complete, state.aggregation.merged]
                self._notify(state.parent, Kind.BROADCAST_REPLY, body)
            except DhtError as exc:  # the aggregate outgrew one datagram
                log.error("cannot send the reply of %r: %s", state.request.topic, exc)

    def _remember(self, bid: bytes) -> None:
        now = time.monotonic()
        self._seen[bid] = now
        horizon = now - 2 * self._settings.replay_window
        while self._seen:
            oldest, at = next(iter(self._seen.items()))
            if at >= horizon:
                break
            del self._seen[oldest]
