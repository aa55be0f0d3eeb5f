"""Courier push (Lee 2003 4.2.3, Job Courier Tuple), pure: idle pilots' standing offers.

The paper's pull strategy (an agent takes a request tuple when it is free) leaves urgent work
waiting for the next pull; its courier tuple "represents a slot an agent offers for immediate
execution", and the factory takes one "when a job needs to be pushed to an agent as quickly as
possible".  Here an idle pilot whose request found nothing may leave its request standing for a
while (``wait`` in the request): that open request is its courier.  When tasks with a priority at
or above the ``courier_priority`` setting become runnable, the instance takes that many offers,
oldest first, and wakes them: each offer's request runs the ordinary take again at once (the
matcher hands out higher priorities first; the take stays transactional, so a task is never
handed out twice), instead of the task waiting for the pilot's next pull.  Tasks below the
threshold wait for pulls, as in the paper's hybrid.  An offer that is woken and finds nothing (the
task went to another pilot, or does not match it) stands again until its wait ends.

``OfferBoard`` only books offers; waking is a callback the HTTP edge gives (``tq.service.api.app``).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass
class Offer:
    """One pilot's standing offer (its open request)."""

    pilot_id: int
    since: float
    wake: Callable[[], None] = field(repr=False)
    pushed: bool = False
    number: int = 0


class OfferBoard:
    """Standing offers in arrival order; ``push`` takes the oldest.  Thread-safe: requests wait
    on the event loop while submissions run in worker threads."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold  # tasks of this priority or more are pushed
        self._offers: dict[int, Offer] = {}
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self.pushed = 0  # offers woken so far (counters for /status and tests)
        self.closed = False  # the server stops: no request stands any more

    def offer(self, pilot_id: int, now: float, wake: Callable[[], None]) -> Offer:
        with self._lock:
            offer = Offer(pilot_id, now, wake, number=next(self._numbers))
            self._offers[offer.number] = offer
            return offer

    def withdraw(self, offer: Offer) -> None:
        """The offer's request ends (answered, timed out, gone)."""
        with self._lock:
            self._offers.pop(offer.number, None)

    def urgent(self, priorities: Iterable[int]) -> int:
        """How many of these tasks' priorities call for a push."""
        return sum(1 for p in priorities if p >= self.threshold)

    def push(self, count: int) -> list[Offer]:
        """Take up to ``count`` offers, oldest first, and wake them; the offers taken."""
        with self._lock:
            taken = list(itertools.islice(self._offers.values(), max(0, count)))
            for offer in taken:
                del self._offers[offer.number]
                offer.pushed = True
            self.pushed += len(taken)
        for offer in taken:
            offer.wake()
        return taken

    def close(self) -> None:
        """The server stops: every standing offer is woken and none stands from now on."""
        self.closed = True
        self.push(len(self))

    def __len__(self) -> int:
        with self._lock:
            return len(self._offers)
