"""Tunable settings of a DHT node and their defaults (documented in docs/dht.md)."""

from __future__ import annotations

from dataclasses import dataclass

MAX_VALUE_BYTES = 16384
"""Bound on ``max_value_bytes``: a value always fits one datagram with room to spare."""


@dataclass(frozen=True)
class DhtSettings:
    """All knobs of the site DHT. Defaults follow the Kademlia paper and Delgado Peris 2014."""

    k: int = 20
    """Bucket size and lookup width (Kademlia section 2.2)."""
    alpha: int = 3
    """Lookup parallelism (Kademlia section 2.3)."""
    replication: int = 4
    """Nodes that store each key.  Delgado Peris 2014 §III.A: "typically, three"; with three, a
    tenth of the pilots dying at once (a batch at its walltime) takes every replica of one key in
    a thousand with it, with four one in ten thousand."""
    join_fill: int = 3
    """Contacts a joining node looks for in each bucket beyond its ``k`` closest neighbours
    before it is done joining (Kademlia section 2.3 refreshes those buckets; see
    ``DhtNode.join``)."""
    rpc_timeout: float = 1.0
    """Seconds to wait for the answer to a request."""
    stale_after: int = 3
    """Consecutive unanswered requests after which a contact is dropped (Kademlia section 4.1)."""
    sweep_interval: float = 300.0
    """Beyond the paper: when a contact misses an answer, the other contacts not heard from since
    the last sweep are pinged too (pilots often end together), at most once in this many seconds."""
    sweep_rate: float = 2.0
    """PINGs per second a sweep sends at most: spread out, so that when many pilots die at once
    the survivors' sweeps do not flood the site while it routes around the dead."""
    value_ttl: float = 86400.0
    """Lifetime in seconds of a published value unless its owner republishes it (Kademlia 2.5)."""
    republish_interval: float = 3600.0
    """Seconds between republishing stored keys and refreshing idle buckets (Kademlia 2.3, 2.5)."""
    max_values_per_key: int = 256
    """Replicas kept per key; the ones expiring first are dropped beyond it."""
    max_value_bytes: int = 1024
    """Largest value accepted by STORE (at most ``MAX_VALUE_BYTES``: one fits a datagram)."""
    regions: int = 8
    """Regions a node splits its broadcast range into (Delgado Peris 2014 §III.B); a power of
    two."""
    broadcast_timeout: float = 5.0
    """Default time the broadcast root waits for the aggregated answer."""
    broadcast_hop_margin: float = 0.25
    """Seconds each level of the broadcast tree answers before its parent gives up (Delgado Peris
    2014 §III.B)."""
    replay_window: float = 60.0
    """Messages whose timestamp is further than this from the receiver's clock are dropped."""
    auth_tag_bytes: int = 16
    """Length of the truncated HMAC-SHA256 tag."""

    def __post_init__(self) -> None:
        if self.k < 1 or self.alpha < 1 or self.replication < 1 or self.join_fill < 1:
            raise ValueError("k, alpha, replication and join_fill must be positive")
        if self.regions < 2 or self.regions & (self.regions - 1):
            raise ValueError("regions must be a power of two >= 2")
        if not 8 <= self.auth_tag_bytes <= 32:
            raise ValueError("auth_tag_bytes must be between 8 and 32")
        if not 1 <= self.max_value_bytes <= MAX_VALUE_BYTES:
            raise ValueError(f"max_value_bytes must be between 1 and {MAX_VALUE_BYTES}")
        if self.stale_after < 1 or self.max_values_per_key < 1:
            raise ValueError("stale_after and max_values_per_key must be positive")
        if self.sweep_rate <= 0:
            raise ValueError("sweep_rate must be positive")
        if self.rpc_timeout <= 0 or self.broadcast_timeout <= 0 or self.replay_window <= 0:
            raise ValueError("timeouts must be positive")

    @property
    def region_bits(self) -> int:
        """Bits of id space consumed per broadcast level: log2(regions)."""
        return self.regions.bit_length() - 1
