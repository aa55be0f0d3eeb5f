"""Jittered exponential backoff per backend, pure (Lee 2003 4.3: a failing backend is retried later,
not hammered).

A backend (a Task Queue instance, a schedd) that fails is left alone for ``base * 2**(n-1)``
seconds after its n-th failure in a row, at most ``cap``, times a random factor in
``[1 - jitter, 1]`` so that many clients that saw the same failure do not come back together.
A success forgets the failures.  Time is passed in (``now``): unit tests drive it with a fake
clock.  Python 3.9, standard library only (pilots use it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass
class _Health:
    failures: int = 0
    until: float = 0.0  # not to be tried before this time


class Backoff:
    """Per-key backoff state: ``failed``, ``succeeded``, ``ready``, ``remaining``."""

    def __init__(
        self,
        base: float = 0.5,
        cap: float = 30.0,
        jitter: float = 0.5,
        rng: random.Random | None = None,
    ) -> None:
        if not base > 0 or cap < base or not 0 <= jitter <= 1:
            raise ValueError("backoff needs base > 0, cap >= base and jitter in [0, 1]")
        self.base = base
        self.cap = cap
        self.jitter = jitter
        self.rng = rng or random.Random()
        self._health: dict[str, _Health] = {}

    def failed(self, key: str, now: float) -> float:
        """Record a failure of ``key``; the seconds it is now left alone."""
        health = self._health.setdefault(key, _Health())
        health.failures += 1
        delay = min(self.cap, self.base * 2.0 ** min(health.failures - 1, 60))
        delay *= 1 - self.jitter * self.rng.random()
        health.until = now + delay
        return delay

    def succeeded(self, key: str) -> None:
        """``key`` answered: its failures are forgotten."""
        self._health.pop(key, None)

    def failures(self, key: str) -> int:
        """Failures of ``key`` in a row."""
        health = self._health.get(key)
        return 0 if health is None else health.failures

    def remaining(self, key: str, now: float) -> float:
        """Seconds until ``key`` may be tried again (0: now)."""
        health = self._health.get(key)
        return 0.0 if health is None else max(0.0, health.until - now)

    def ready(self, key: str, now: float) -> bool:
        return self.remaining(key, now) <= 0
