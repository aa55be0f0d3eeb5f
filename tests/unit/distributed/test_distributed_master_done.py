"""The master's answer to a worker's ``done`` (Delgado Peris 2014 §III.B): "held" until the Task
Queue has the completion, then ``"synced"``, so that the worker keeps resending it until then (a
master that steps down holding it loses nothing).  Every message travels sealed with the worker's
key for the master's epoch (``distributed.codec``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

from glidein_ext.distributed import codec as messages
from glidein_ext.distributed.master import MasterRole
from glidein_ext.errors import TaskQueueError
from glidein_ext.tq.client import pilotkeys
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.protocol import Completion, SitePilot, SiteSyncAnswer
from tests.support.masters import RecordingNode, installed_master

EPOCH = 3
KEY = pilotkeys.epoch_key(pilotkeys.pilot_key(b"s" * 32, "T2_XX_Test", 7), EPOCH)


def _master() -> tuple[MasterRole, RecordingNode]:
    return installed_master("T2_XX_Test", EPOCH, [SitePilot(7, "127.0.0.1:4007", key=KEY.hex())])


def _send(node: RecordingNode, kind: str, body: Any) -> Any:
    """A worker's sealed message and the value of the master's sealed answer (None: none)."""
    payload = messages.seal(KEY, kind, 7, EPOCH, body, time.time())
    answer = node.handlers[kind](payload, 7, None)
    if answer is None:
        return None
    return messages.open_answer(KEY, kind, payload[2], answer)


def test_done_is_answered_held_then_synced_and_none_once_stepped_down() -> None:
    role, node = _master()
    body = messages.encode(messages.Done(7, Completion(40, 1, 0)))
    assert _send(node, messages.DONE, body) is True  # held: not at the Task Queue yet
    report = role.core.book.take_report(1.0)
    assert [c.task_id for _, c in report.completions] == [40]
    assert _send(node, messages.DONE, body) is True  # in flight
    role.core.book.reported()
    assert _send(node, messages.DONE, body) == messages.DONE_SYNCED  # the worker may forget it
    role.core.active = False
    assert _send(node, messages.DONE, body) is None  # not the master any more


class _Tq:
    """The Task Queue's ``sync``, recorded; the first ``fail`` calls fail."""

    def __init__(self, fail: int = 0) -> None:
        self.calls: list[Any] = []
        self.fail = fail

    def sync(self, site: str, call: Any) -> Any:
        self.calls.append(call)
        if len(self.calls) <= self.fail:
            raise TaskQueueError("the Task Queue is away")
        return SiteSyncAnswer()


def test_a_leaving_master_syncs_the_completions_it_holds_before_the_role_ends() -> None:
    """A worker's completion (acknowledged, held) and the master's own reach the Task Queue in
    the leaving master's last sync (retried once after a failure); then the role is over."""
    role, node = _master()
    tq = _Tq(fail=1)
    role.client = cast(TqClient, tq)
    assert (
        _send(node, messages.DONE, messages.encode(messages.Done(7, Completion(40, 1, 0)))) is True
    )
    role.local_done(1, Completion(41, 1, 0))  # the master pilot's own last task
    role.core.book.dead(7)
    assert asyncio.run(role.close(5.0)) is True
    assert len(tq.calls) == 2  # the first failed: everything carried again
    last = tq.calls[-1]
    assert sorted(c.completion.task_id for c in last.completions) == [40, 41]
    assert last.dead == (7,) and last.want == 0
    assert not role.active
    assert asyncio.run(role.close(5.0)) is False  # once
