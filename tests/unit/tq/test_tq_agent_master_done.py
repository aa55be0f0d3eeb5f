"""The master's answer to a worker's ``done`` (Delgado Peris 2014 §III.B): "held" until the Task
Queue has the completion, then ``"synced"``, so that the worker keeps resending it until then (a
master that steps down holding it loses nothing)."""

from __future__ import annotations

from typing import Any, cast

from glidein_ext.agent import messages
from glidein_ext.agent.master import MasterRole
from glidein_ext.dht.node import DhtNode
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.protocol import Completion


class _Node:
    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}

    def register_message(self, kind: str, handler: Any) -> None:
        self.handlers[kind] = handler


def test_done_is_answered_held_then_synced_and_none_once_stepped_down() -> None:
    node = _Node()
    role = MasterRole(
        cast(DhtNode, node),
        cast(TqClient, None),
        "T2_XX_Test",
        1,
        3,
        window=0.1,
        period=1.0,
        heartbeat=2.0,
    )
    role.install()
    done = node.handlers[messages.DONE]
    payload = messages.encode_done(7, Completion(40, 1, 0))
    assert done(payload, 7, None) is True  # held: not at the Task Queue yet
    report = role.book.take_report(1.0)
    assert [c.task_id for _, c in report.completions] == [40]
    assert done(payload, 7, None) is True  # in flight
    role.book.reported()
    assert done(payload, 7, None) == messages.DONE_SYNCED  # the worker may forget it
    role.active = False
    assert done(payload, 7, None) is None  # not the master any more
