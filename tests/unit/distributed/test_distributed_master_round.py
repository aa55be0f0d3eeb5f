"""One master round driven with doubles for the DHT node and the Task Queue (Delgado Peris 2014
§III.B-C): its phases are timed (``MasterRole.phases``), the tasks are handed
out sealed with each worker's key while the round ends, and the TaskList wait follows the recent
broadcasts."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, cast

import pytest

from glidein_ext.dht.broadcaster import BroadcastResult
from glidein_ext.dht.node import DhtNode
from glidein_ext.distributed import codec as messages
from glidein_ext.distributed.master import (
    BROADCAST_FLOOR,
    REFUSED_BURST,
    REFUSED_PERIOD,
    MasterRole,
)
from glidein_ext.distributed.master_state import Started
from glidein_ext.distributed.phases import PHASES
from glidein_ext.sched.ranking import Ranking
from glidein_ext.sched.tasklist import encode_reply
from glidein_ext.tq.client import pilotkeys
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.protocol import (
    Completion,
    CompletionAnswer,
    Pair,
    Placed,
    Refused,
    SiteAssign,
    SiteAssignAnswer,
    SitePilot,
    SiteSync,
    SiteSyncAnswer,
    TaskOffer,
)

SITE = "T2_XX_Test"
EPOCH = 2


def key(pilot: int) -> bytes:
    return pilotkeys.epoch_key(pilotkeys.pilot_key(b"k" * 32, SITE, pilot), EPOCH)


class _Node:
    address = ("127.0.0.1", 4001)

    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}
        self.sent: list[tuple[int, Any]] = []
        self.waits: list[float] = []

    def register_message(self, kind: str, handler: Any) -> None:
        self.handlers[kind] = handler

    async def broadcast(self, topic: str, payload: Any, timeout: float) -> BroadcastResult:
        self.waits.append(timeout)
        replies = [encode_reply(p, 0, 0, Ranking({0: 1.0, 1: 0.5}, 2)) for p in (7, 8)]
        return BroadcastResult([r for reply in replies for r in reply], True, 0.01)

    async def message(self, address: Any, kind: str, payload: Any, timeout: Any = None) -> Any:
        pilot = address[1] - 4000
        envelope = messages.unseal(payload, kind)
        assert messages.authentic(key(pilot), kind, envelope)  # sealed with that worker's key
        self.sent.append((pilot, messages.ASSIGN_CODEC.decode(envelope.body).task.task_id))
        return messages.seal_answer(key(pilot), kind, envelope.nonce, True)

    async def ping(self, address: Any, timeout: Any = None) -> Any:
        return True


class _Client:
    """The Task Queue: ``TASKS`` runnable; every call recorded."""

    TASKS: tuple[int, ...] = (40, 41)

    def __init__(self) -> None:
        self.syncs: list[SiteSync] = []
        self.assigns: list[SiteAssign] = []

    def sync(self, site: str, call: SiteSync) -> SiteSyncAnswer:
        self.syncs.append(call)
        offers = tuple(TaskOffer(t, f"t{t}", "true", (), (), 60) for t in self.TASKS)
        return SiteSyncAnswer(offers[: call.want], (), len(self.TASKS))

    def assign(self, site: str, call: SiteAssign) -> SiteAssignAnswer:
        self.assigns.append(call)
        return SiteAssignAnswer(tuple(Placed(p.task_id, p.pilot_id, 1) for p in call.pairs))


def _role(node: _Node, client: _Client, **settings: Any) -> MasterRole:
    """A master of epoch ``EPOCH`` for pilot 1 of ``SITE`` with short rounds."""
    return MasterRole(
        cast(DhtNode, node),
        cast(TqClient, client),
        SITE,
        1,
        EPOCH,
        window=0.1,
        period=1.0,
        heartbeat=5.0,
        **settings,
    )


def _run_round(role: MasterRole) -> None:
    """One round through the shell, now (no timer: nothing else starts), until its calls,
    broadcast and hand-outs have ended."""

    async def one_round() -> None:
        role._arm = lambda at: None  # type: ignore[method-assign]
        window = role.core.book.window
        role.core.book.window = 0.0  # the round is due at once
        role.core.book.trigger(time.monotonic())
        role._feed(Started(time.monotonic(), role.node.address))
        role.core.book.window = window
        while role._tasks:
            await asyncio.gather(*list(role._tasks))
        role._stop()

    asyncio.run(one_round())


def _one_round(role: MasterRole) -> None:
    """Workers 7 and 8 installed, one round, its hand-outs finished."""
    role.install([SitePilot(p, f"127.0.0.1:{4000 + p}", key=key(p).hex()) for p in (7, 8)])
    _run_round(role)


def test_a_round_is_timed_phase_by_phase_and_hands_out_sealed() -> None:
    node = _Node()
    role = _role(node, _Client(), method="greedy")
    _one_round(role)
    assert sorted(node.sent) == [(7, 40), (8, 41)] or sorted(node.sent) == [(7, 41), (8, 40)]
    assert set(role.phases.timings) == set(PHASES) - {"hand_out"}
    assert all(seconds >= 0 for seconds in role.phases.timings.values())
    assert role.phases.rounds == 1 and role.phases.totals["hand_out"] > 0
    assert all(not w.delivering for w in role.core.book.workers.values())


def test_the_tasklist_wait_follows_the_recent_broadcasts() -> None:
    role = _role(_Node(), _Client(), broadcast_timeout=4.0)
    assert role.core.waits.wait() == 4.0  # nothing known yet: the configured timeout
    role.core.waits.recent.extend([0.05] * 10)
    assert role.core.waits.wait() == BROADCAST_FLOOR
    role.core.waits.recent.extend([0.4] * 10)
    assert abs(role.core.waits.wait() - 1.2) < 1e-9
    role.core.waits.recent.extend([8.0] * 3)  # timed out: twice the wait
    assert role.core.waits.wait() == 4.0


class _Refusing(_Client):
    def assign(self, site: str, call: SiteAssign) -> SiteAssignAnswer:
        first, *rest = call.pairs
        refused = tuple(Refused(p.task_id, p.pilot_id, "the pilot runs task 9") for p in rest)
        return SiteAssignAnswer((Placed(first.task_id, first.pilot_id, 1),), refused)


def test_each_refused_pair_is_logged_once_and_the_log_is_rate_limited(
    caplog: pytest.LogCaptureFixture,
) -> None:
    node = _Node()
    role = _role(node, _Refusing(), method="greedy")
    with caplog.at_level(logging.INFO, logger="glidein_ext.distributed.master"):
        _one_round(role)
    lines = [r.getMessage() for r in caplog.records if "refused task" in r.getMessage()]
    assert len(lines) == 1 and lines[0].endswith(": the pilot runs task 9"), lines
    assert len(node.sent) == 1  # the refused pair is not handed out
    caplog.clear()
    many = [Refused(t, 7, "task is done, not queued") for t in range(REFUSED_BURST + 5)]
    with caplog.at_level(logging.INFO, logger="glidein_ext.distributed.master"):
        now = time.monotonic()  # the round's period still
        role.refused.write(many, now)
        role.refused.write(many[:1], now + REFUSED_PERIOD)  # a new period: the count first
    messages_ = [r.getMessage() for r in caplog.records]
    refused = [m for m in messages_ if "refused task" in m]
    assert len(refused) == REFUSED_BURST  # the round's line, 19 more, then 1 in the new period
    assert any(
        m.startswith(f"master: {len(many) - REFUSED_BURST + 1} more refused") for m in messages_
    )


class _SuccessorClient(_Client):
    """Names task t+10 as the successor of each placed task t; counts the calls."""

    def assign(self, site: str, call: SiteAssign) -> SiteAssignAnswer:
        self.assigns.append(call)
        placed = tuple(self.placed(p) for p in call.pairs)
        return SiteAssignAnswer(
            placed, (), tuple(CompletionAnswer(True, False, "done") for _ in call.completions)
        )

    def placed(self, pair: Pair) -> Placed:
        return Placed(
            pair.task_id, pair.pilot_id, 1, (TaskOffer(pair.task_id + 10, "s", "true", (), (), 60),)
        )


def test_a_round_of_successors_makes_no_sync_and_its_assign_carries_the_completions() -> None:
    node = _Node()
    client = _SuccessorClient()
    role = _role(node, client, method="greedy")
    _one_round(role)  # a sync, then 40 and 41 to workers 7 and 8
    assert len(client.syncs) == 1 and len(client.assigns) == 1
    ran = dict(node.sent)
    for pilot in (7, 8):
        done = Completion(ran[pilot], 1, 0)
        role.core.book.completed(pilot, (ran[pilot], 1), done, time.monotonic())
    node.sent.clear()

    _run_round(role)
    assert len(client.syncs) == 1  # none this round: the successors covered both workers
    assert len(node.waits) == 1  # nor a TaskList: each worker made its successor's input
    assert client.assigns[1].round.method == "successor"
    (_, carried) = client.assigns
    assert sorted(c.completion.task_id for c in carried.completions) == [40, 41]
    assert sorted(t for _, t in node.sent) == [50, 51]
    assert role.core.book.pending() == []  # the Task Queue has them
    assert role.core.stock.direct([7, 8]) is None  # the round is over: nothing held back


class _MergeClient(_SuccessorClient):
    """Names merge 60, which reads the outputs of 40 and 41, with each of them."""

    def placed(self, pair: Pair) -> Placed:
        if pair.task_id not in (40, 41):
            return Placed(pair.task_id, pair.pilot_id, 1)
        merge = TaskOffer(60, "m", "true", ("/f40", "/f41"), (), 60)
        return Placed(pair.task_id, pair.pilot_id, 1, (merge,), False, ((81 - pair.task_id,),))


def test_a_merge_goes_to_the_maker_of_its_last_input_without_a_sync() -> None:
    node = _Node()
    client = _MergeClient()
    role = _role(node, client, method="greedy")
    _one_round(role)  # 40 and 41 to workers 7 and 8: each names the merge, with the other
    ran = {task: pilot for pilot, task in node.sent}
    now = time.monotonic()
    for task in (40, 41):
        role.core.book.completed(ran[task], (task, 1), Completion(task, 1, 0), now)
    assert role.core.stock.direct([ran[41]]) is None  # the stock has not seen them yet
    node.sent.clear()
    role.core.book.assigned([(99, ran[40], 1)])  # the maker of 40 is busy again: only one idle

    _run_round(role)
    assert len(client.syncs) == 1  # no sync: both inputs were made here
    assert node.sent == [(ran[41], 60)]  # to the last maker the stock saw


def test_a_failed_completion_releases_no_successor_and_the_round_syncs() -> None:
    node = _Node()
    client = _SuccessorClient()
    role = _role(node, client, method="greedy")
    _one_round(role)
    ran = dict(node.sent)
    role.core.book.completed(7, (ran[7], 1), Completion(ran[7], 1, 3), time.monotonic())  # exit 3
    role.core.book.completed(8, (ran[8], 1), Completion(ran[8], 1, 0), time.monotonic())

    _run_round(role)
    assert len(client.syncs) == 2  # worker 7 has no successor: the Task Queue's offers
    assert sorted(c.completion.task_id for c in client.syncs[1].completions) == [40, 41]
    assert all(not call.completions for call in client.assigns)


class _Workers(_Node):
    """Broadcast replies: the pilots of ``idle`` rank the TaskList by ``ranks``, the others
    say they are busy."""

    def __init__(self) -> None:
        super().__init__()
        self.idle: dict[int, dict[int, float]] = {}

    async def broadcast(self, topic: str, payload: Any, timeout: float) -> BroadcastResult:
        replies = []
        for pilot in (7, 8):
            ranks = self.idle.get(pilot)
            ranking = None if ranks is None else Ranking(ranks, len(ranks))
            replies += encode_reply(pilot, 0 if ranks is not None else 99, 0, ranking)
        return BroadcastResult(replies, True, 0.01)


class _Counting(_Client):
    """The Task Queue: four runnable tasks; every call recorded."""

    TASKS = (40, 41, 42, 43)


def test_a_round_ranks_the_last_syncs_spare_offers_without_a_sync() -> None:
    """The sync's offers no round placed serve the next round: its TaskList, ranked by the
    workers as any; its assign carries the completion (``sched.stock``)."""
    node, client = _Workers(), _Counting()
    role = _role(node, client, method="greedy")
    node.idle = {7: {0: 1.0, 1: 0.5}, 8: {0: 0.5, 1: 1.0}}
    _one_round(role)
    assert len(client.syncs) == 1 and client.syncs[0].want == 8
    assert [(p.task_id, p.pilot_id) for p in client.assigns[0].pairs] == [(40, 7), (41, 8)]
    role.local_done(7, Completion(40, 1, 0))
    node.idle = {7: {0: 1.0, 1: 1.0}}  # positions 0 and 1 of the spares: 42 and 43

    _run_round(role)
    assert len(client.syncs) == 1  # no sync
    second = client.assigns[1]
    assert [(p.task_id, p.pilot_id) for p in second.pairs] == [(42, 7)]
    assert [c.completion.task_id for c in second.completions] == [40]
    assert role.core.book.synced((40, 1))


def test_a_merges_input_is_quiet_unless_the_other_inputs_completion_is_held() -> None:
    """Merge 50 of tasks 40 (on worker 7) and 41 (on 8): 40's success releases nothing while 41
    runs, so it need not bring a round; once 41's completion is held (not yet at the Task
    Queue), 40's releases the merge."""
    role = _role(_Node(), _Client())
    merge = TaskOffer(50, "m", "true", ("/a", "/b"), (), 60)
    role.core.stock.placed(40, (merge,), needs=((41,),))
    role.core.stock.placed(41, (merge,), needs=((40,),))
    role.install([SitePilot(p, f"127.0.0.1:{4000 + p}", key=key(p).hex()) for p in (7, 8)])
    assert role.core.stock.quiet(40, 7, {k[0] for k, _, _ in role.core.book.pending()})
    role.core.book.completed(8, (41, 1), Completion(41, 1, 0), time.monotonic())
    assert not role.core.stock.quiet(40, 7, {k[0] for k, _, _ in role.core.book.pending()})
