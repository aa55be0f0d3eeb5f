"""Key/value storage with append, deduplication and expiry (Delgado Peris 2014, section III.A).

"If a Store message is received for an already known key, the new value is appended to the
existing one", so one file name maps to all its replicas.  Values are deduplicated by their bytes,
carry the id of the node that published them (their owner) and expire unless republished
(Kademlia paper, section 2.5).  Pure code: time (a monotonic clock) is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StoredValue:
    """One value of a key: its bytes, its publisher and when it expires (local clock)."""

    __slots__ = ("data", "expires_at", "owner")

    data: bytes
    owner: int
    expires_at: float

    def ttl(self, now: float) -> float:
        return max(0.0, self.expires_at - now)


class Storage:
    """The values this node holds."""

    def __init__(self, max_values_per_key: int = 256) -> None:
        self.max_values_per_key = max_values_per_key
        self._data: dict[int, dict[bytes, StoredValue]] = {}
        self._stored_at: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def append(self, key: int, data: bytes, owner: int, ttl: float, now: float) -> bool:
        """Add one value to ``key``'s list; return True when it was not there before.

        A value already present keeps the later expiry and takes the newer owner.
        """
        if ttl <= 0:
            return False
        values = self._data.setdefault(key, {})
        self._stored_at[key] = now
        expires_at = now + ttl
        old = values.get(data)
        if old is not None:
            values[data] = StoredValue(data, owner, max(expires_at, old.expires_at))
            return False
        values[data] = StoredValue(data, owner, expires_at)
        if len(values) > self.max_values_per_key:
            first = min(values.values(), key=lambda v: v.expires_at)
            del values[first.data]
            return first.data != data
        return True

    def remove(self, key: int, data: bytes, owner: int) -> bool:
        """Withdraw one value, only for its owner (the node that published it); True if gone.

        A file left the owner's cache: its location must not be handed out any more.  Another
        node's value of the same bytes is not the sender's to remove.
        """
        values = self._data.get(key)
        if not values or data not in values or values[data].owner != owner:
            return False
        del values[data]
        if not values:
            del self._data[key]
            self._stored_at.pop(key, None)
        return True

    def get(self, key: int, now: float) -> list[StoredValue]:
        """Live values of ``key``, oldest-expiring last."""
        values = self._data.get(key)
        if not values:
            return []
        live = [v for v in values.values() if v.expires_at > now]
        live.sort(key=lambda v: v.expires_at, reverse=True)
        return live

    def keys(self) -> list[int]:
        return list(self._data)

    def expire(self, now: float) -> int:
        """Drop expired values and empty keys; return how many values went."""
        dropped = 0
        for key in list(self._data):
            values = self._data[key]
            for data in [d for d, v in values.items() if v.expires_at <= now]:
                del values[data]
                dropped += 1
            if not values:
                del self._data[key]
                self._stored_at.pop(key, None)
        return dropped

    def due_for_republish(self, now: float, interval: float) -> list[int]:
        """Keys not stored to us for ``interval``: someone else republished the fresh ones.

        Kademlia section 2.5's optimisation: a node that received a STORE for a key within the
        last interval skips republishing it.
        """
        return [key for key, at in self._stored_at.items() if now - at >= interval]

    def mark_republished(self, key: int, now: float) -> None:
        if key in self._stored_at:
            self._stored_at[key] = now
