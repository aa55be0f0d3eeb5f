"""A master's asyncio shell without a network: its node only records the message handlers the
role registers, and the tests call them as the DHT would (Delgado Peris 2014 §III.B-C)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from glidein_ext.dht.node import DhtNode
from glidein_ext.distributed.master import MasterRole
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.protocol import SitePilot


class RecordingNode:
    """The message handlers registered on it, by kind."""

    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}

    def register_message(self, kind: str, handler: Any) -> None:
        self.handlers[kind] = handler


def installed_master(
    site: str, epoch: int, pilots: Sequence[SitePilot]
) -> tuple[MasterRole, RecordingNode]:
    """Pilot 1 as the master of ``epoch`` at ``site`` (no Task Queue), ``pilots`` installed."""
    node = RecordingNode()
    role = MasterRole(
        cast(DhtNode, node), cast(TqClient, None), site, 1, epoch, window=0.1, period=1, heartbeat=2
    )
    role.install(pilots)
    return role, node
