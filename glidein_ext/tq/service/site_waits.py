"""A distributed site's long poll: the master's ``sync`` held while the site has nothing to run.

A master whose site has nothing runnable, and which owes the Task Queue nothing but completions
that release no task, asks its ``sync`` to wait (``SiteSync.wait``, Delgado Peris 2014 §III.B's
TaskList fetch made a long poll): instead of polling every few seconds, it is answered as soon
as tasks are queued -- a submission, a completion that releases tasks, a task requeued, or
another instance's change absorbed from the pool's notifications (each reaches the matcher:
``Matcher.on_queued``) -- or when the wait ends.  Queued tasks of any site wake every waiting
call, which looks again; its own site's offers decide whether it is answered.  A newer call of
the same site (the master moved on, or another master took over) ends the site's waiting call at
once: a site has one long poll at most.  A call notes :attr:`SiteWaits.generation` before it
reads the offers, so tasks queued between that read and its wait (a submission's thread) are not
missed.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

MAX_WAIT = 60.0  # seconds: the longest wait a sync may ask for
GATHER = 0.05  # seconds a woken call lets a submission's tasks arrive before it looks again


@dataclass
class _Waiter:
    number: int
    event: asyncio.Event = field(default_factory=asyncio.Event)


class SiteWaits:
    """The sites' waiting calls, woken by queued tasks and ended by their site's next call."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._latest: dict[str, int] = {}  # site -> the number of its newest call
        self._waiters: dict[str, _Waiter] = {}
        self._numbers = itertools.count(1)
        self._scheduled = False
        self._closed = False
        self.generation = 0  # tasks queued so far (a call compares it with what it read)

    def __len__(self) -> int:
        return len(self._waiters)

    def queued(self) -> None:
        """Tasks were queued (the matcher's hook: on the event loop or a submission's thread)."""
        self.generation += 1
        loop = self._loop
        if loop is None or self._scheduled or not self._waiters:
            return
        self._scheduled = True
        loop.call_soon_threadsafe(self._wake_all)

    def _wake_all(self) -> None:
        self._scheduled = False
        for waiter in self._waiters.values():
            waiter.event.set()

    def close(self) -> None:
        """The server stops: every waiting call ends now and none waits from now on (a clean
        stop does not wait out the polls)."""
        self._closed = True
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake_all)

    def begin(self, site: str) -> int:
        """A master's call of ``site`` arrived: its number; the site's waiting call ends."""
        number = next(self._numbers)
        self._latest[site] = number
        waiter = self._waiters.get(site)
        if waiter is not None:
            waiter.event.set()
        return number

    def newest(self, site: str, number: int) -> bool:
        """Call ``number`` is still its site's newest (no later call ended it)."""
        return self._latest.get(site) == number

    async def wait(self, site: str, number: int, seconds: float, seen: int) -> bool:
        """Call ``number`` of ``site``, which read the offers at :attr:`generation` ``seen``,
        waits up to ``seconds``: True when tasks were queued since (look again), False when the
        time is up or a newer call of the site came."""
        if self._closed or self._latest.get(site) != number:
            return False
        self._loop = asyncio.get_running_loop()
        if self.generation != seen:
            return True
        waiter = self._waiters[site] = _Waiter(number)
        try:
            await asyncio.wait_for(waiter.event.wait(), seconds)
        except TimeoutError:
            return False
        finally:
            if self._waiters.get(site) is waiter:
                del self._waiters[site]
        if self._closed or self._latest.get(site) != number:
            return False
        await asyncio.sleep(GATHER)
        return self._latest.get(site) == number
