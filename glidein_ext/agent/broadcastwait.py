"""How long a master's TaskList broadcast waits for the workers' replies (Delgado Peris 2014
§III.C: the replies come back up the DHT's aggregation tree).

Three times the recent broadcasts' 90th percentile, between ``BROADCAST_FLOOR`` and the
configured timeout.  One slow pilot (a busy process, a dead node not yet dropped) then holds a
round up for a fraction of a second, not for the whole timeout, while a site whose broadcasts are
slow gets the time they take; a pilot whose reply missed the round only waits for the next (and
is probed after ``miss_limit`` rounds in a row).  A timed-out broadcast counts as twice its wait,
so the next one waits longer.  Pure.

Python 3.9, standard library only.
"""

from __future__ import annotations

from collections import deque

BROADCAST_FLOOR = 0.5  # seconds: the shortest TaskList wait
BROADCAST_SAMPLES = 16  # recent broadcasts the wait is fitted to


class BroadcastWait:
    """The recent broadcasts' durations, and the next one's wait."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.recent: deque[float] = deque(maxlen=BROADCAST_SAMPLES)  # their durations

    def wait(self) -> float:
        """The next broadcast's wait (the timeout while none is known)."""
        if not self.recent:
            return self.timeout
        ordered = sorted(self.recent)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        return min(self.timeout, max(BROADCAST_FLOOR, 3 * p90))

    def record(self, elapsed: float, complete: bool, waited: float) -> None:
        """A broadcast ended after ``elapsed`` seconds; one that timed out counts as twice its
        wait."""
        self.recent.append(elapsed if complete else 2 * waited)
