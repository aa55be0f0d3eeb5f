"""Counters a node keeps about its traffic; tests and the benchmark read them."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class NodeStats:
    sent: int = 0
    received: int = 0
    dropped_malformed: int = 0
    dropped_auth: int = 0
    dropped_replay: int = 0
    dropped_unexpected: int = 0
    handler_errors: int = 0
    rpc_timeouts: int = 0
    broadcasts_handled: int = 0
    broadcasts_forwarded: int = 0
    broadcast_duplicates: int = 0
    broadcast_late_replies: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
