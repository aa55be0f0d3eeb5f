"""A clock the test moves by hand, for code that takes a ``clock``: no wall-clock bound."""

from __future__ import annotations


class Clock:
    """``clock()`` answers ``now``; the test advances it (``clock.now += 6``)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
