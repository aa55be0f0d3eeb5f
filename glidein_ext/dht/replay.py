"""The replay window: each (sender, nonce) is accepted once, and only while it is fresh.

Beyond the paper: a message older or newer than ``window`` seconds by the receiver's clock is
dropped, and a nonce seen from the same sender within the last ``2 * window`` seconds (long enough
to outlive any timestamp the window still accepts) is dropped as a replay.  Pure code.
"""

from __future__ import annotations

from collections import OrderedDict
from enum import Enum


class Verdict(Enum):
    FRESH = "fresh"
    STALE = "stale"
    REPLAYED = "replayed"


class ReplayGuard:
    """Remembers recent nonces, in arrival order so that forgetting is cheap."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._seen: OrderedDict[tuple[int, bytes], float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def check(self, sender: int, nonce: bytes, timestamp: float, now: float) -> Verdict:
        """Judge one message; a FRESH one is remembered."""
        self._forget(now)
        if abs(now - timestamp) > self.window:
            return Verdict.STALE
        ident = (sender, nonce)
        if ident in self._seen:
            return Verdict.REPLAYED
        self._seen[ident] = now + 2 * self.window
        return Verdict.FRESH

    def _forget(self, now: float) -> None:
        seen = self._seen
        while seen:
            ident, forget_at = next(iter(seen.items()))
            if forget_at > now:
                break
            del seen[ident]
