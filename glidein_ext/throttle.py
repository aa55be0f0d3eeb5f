"""A self-throttling rate, pure: additive increase, multiplicative decrease (AIMD).

Lee 2003 §4.3 (Resource Broker Agent): "the rate of retrieval ... is typically controlled by the
failure submission rate to the underlying resource broker ... By throttling the retrieval rate,
the agent attempts to minimize and adapt to the failure rate."  A component keeps one Throttle per
backend it calls (a Task Queue instance, a schedd, the SE): each failure the backend causes
multiplies the rate by ``decrease`` (down to ``min_rate``) and empties the bucket, so the next call
waits ``1 / rate``; each success adds ``increase`` to the rate (up to ``max_rate``): it recovers
gradually.  Calls are spent from a token bucket refilled at the current rate, holding at most
``burst``.  With ``limit_healthy=False`` a throttle at its full rate limits nothing (a client
that should only slow down once a backend fails: the Task Queue client).  Time is passed in: unit
tests drive it with a fake clock.  Python 3.9, standard library only (pilots use it).
"""

from __future__ import annotations

import math


class Throttle:
    """``delay(now)`` before a call, ``take(now)`` when making it, then ``succeeded``/``failed``;
    ``allowance(now)``: how many calls (pilots, requests) may go now."""

    def __init__(
        self,
        max_rate: float = 50.0,
        min_rate: float = 0.2,
        burst: float = 10.0,
        decrease: float = 0.5,
        increase: float = 1.0,
        limit_healthy: bool = True,
    ) -> None:
        if not 0 < min_rate <= max_rate or burst < 1 or not 0 < decrease < 1 or increase <= 0:
            raise ValueError(
                "throttle needs 0 < min_rate <= max_rate, burst >= 1, 0 < decrease < 1, "
                "increase > 0"
            )
        self.max_rate = max_rate
        self.min_rate = min_rate
        self.burst = burst
        self.decrease = decrease
        self.increase = increase
        self.limit_healthy = limit_healthy
        self.rate = max_rate  # calls per second allowed now
        self._tokens = burst
        self._last: float | None = None

    def _refill(self, now: float) -> None:
        if self._last is not None and now > self._last:
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        if self._last is None or now > self._last:
            self._last = now

    def allowance(self, now: float) -> int:
        """Calls that may be made now without waiting."""
        self._refill(now)
        return max(0, math.floor(self._tokens))

    def delay(self, now: float) -> float:
        """Seconds to wait before the next call (0: go)."""
        self._refill(now)
        if not self.limit_healthy and not self.throttled:
            return 0.0
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.rate

    def take(self, now: float, count: int = 1) -> None:
        """``count`` calls are made now (the bucket may go below zero: later calls wait)."""
        self._refill(now)
        self._tokens -= count
        if not self.limit_healthy and not self.throttled:
            self._tokens = max(self._tokens, 0.0)  # unlimited while healthy: no debt

    def succeeded(self) -> None:
        """The backend answered: the rate grows by ``increase`` (additive)."""
        self.rate = min(self.max_rate, self.rate + self.increase)
        if not self.limit_healthy and not self.throttled:
            self._tokens = self.burst  # back to full health: no debt carried over

    def failed(self, now: float) -> None:
        """The backend failed or refused: the rate is cut (multiplicative), the bucket emptied."""
        self._refill(now)
        self.rate = max(self.min_rate, self.rate * self.decrease)
        self._tokens = min(self._tokens, 0.0)

    @property
    def throttled(self) -> bool:
        """Below its full rate (a backend failed recently)."""
        return self.rate < self.max_rate
