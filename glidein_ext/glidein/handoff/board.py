"""The hand-off board of a glidein's agent: :class:`~glidein_ext.glidein.handoff.core.HandoffLedger`
behind a lock, with the waits of its two sides.

- The lanes (the glidein's pilots, in their threads): :meth:`Board.wait_room` blocks until the
  startd has room for one more task; :meth:`Board.offer` then :meth:`Board.wait_end` hand a task
  over and wait for its end, ticking the timeouts of :meth:`HandoffLedger.tick` meanwhile.
- The hooks (the agent's socket server, one thread per connection): :meth:`Board.fetch` gives a
  free slot the oldest task that fits, and when none does but the startd has room, wakes a lane
  to ask for one and waits a little (``fetch_wait``) for it, so that the first fetch after a
  task ends usually gets the next one; the verdicts and job events go straight to the core.

Python 3.9, standard library only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from glidein_ext.glidein.handoff.core import (
    EndKind,
    HandedTask,
    HandoffLedger,
    Key,
    SlotView,
    Stage,
    TaskEnd,
)
from glidein_ext.procs import pid_alive

log = logging.getLogger("glidein_ext.agent")

T = TypeVar("T")

STOP_GRACE = 15.0  # seconds a stopping agent still waits for a job the startd has


class Board:
    """Thread-safe hand-off between the lanes and the startd's hooks."""

    def __init__(
        self,
        core: HandoffLedger | None = None,
        *,
        fetch_wait: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        alive: Callable[[int], bool] = pid_alive,
    ) -> None:
        self.core = core or HandoffLedger()
        self.fetch_wait = fetch_wait
        self.clock = clock
        self.alive = alive
        self.cond = threading.Condition()
        self.waiting = 0  # lanes blocked in wait_room
        self.fetches = 0

    # --- the lanes ------------------------------------------------------------------------

    def wait_room(self, stop: threading.Event, poll: float = 0.5) -> bool:
        """Block until this lane may ask for a task (True; call :meth:`asked` after), or the
        board is closed or ``stop`` is set (False)."""
        with self.cond:
            self.waiting += 1
            try:
                while not stop.is_set() and not self.core.closed:
                    if self.core.begin_ask(self.clock()):
                        return True
                    self.cond.wait(poll)
                return False
            finally:
                self.waiting -= 1

    def asked(self) -> None:
        with self.cond:
            self.core.end_ask()
            self.cond.notify_all()

    def has_room(self) -> bool:
        with self.cond:
            return self.core.room(self.clock()) > 0

    @property
    def closed(self) -> bool:
        return self.core.closed

    def _change(self, change: Callable[[float], T]) -> T:
        """``change(now)`` applied to the core under the lock; whoever waits on it is woken."""
        with self.cond:
            result = change(self.clock())
            self.cond.notify_all()
            return result

    def offer(self, handoff: HandedTask) -> bool:
        return self._change(lambda now: self.core.offer(handoff, now))

    def default_memory(self) -> int:
        """MB per CPU of the glidein's slot (0 before the first fetch)."""
        with self.cond:
            return self.core.default_memory

    def wait_end(
        self,
        key: Key,
        stop: threading.Event,
        watch: Callable[[HandedTask, float], None] | None = None,
        poll: float = 0.5,
    ) -> TaskEnd:
        """Wait for the task's end.  ``watch(handoff, now)`` is called (lock released) each
        poll while it waits (the executor's max_runtime watchdog).  When ``stop`` is set, a task
        no startd has is cancelled at once, and one the startd has is waited for at most
        STOP_GRACE seconds more (then it counts as evicted: the lane gives it back)."""
        stopping_since: float | None = None
        while True:
            with self.cond:
                now = self.clock()
                self.core.tick(now, self.alive)
                end = self.core.finish(key)
                if end is not None:
                    self.cond.notify_all()
                    return end
                if stop.is_set():
                    if self.core.withdraw(key, "the pilot is stopping"):
                        continue
                    stopping_since = now if stopping_since is None else stopping_since
                    if now - stopping_since > STOP_GRACE:
                        self.core.tasks.pop(key, None)
                        self.cond.notify_all()
                        return TaskEnd(EndKind.EVICTED, detail="the pilot stopped before its end")
                handoff = self.core.tasks.get(key)
                if handoff is None:  # cannot happen: only this lane ends its own key
                    return TaskEnd(EndKind.EVICTED, detail="the task left the board")
                self.cond.wait(poll)
            if watch is not None:
                watch(handoff, self.clock())

    # --- the hooks ------------------------------------------------------------------------

    def fetch(self, slot: SlotView) -> dict[str, Any] | None:
        """FETCH_WORK from a free slot: a job ad, or None (nothing fits, no room, or closed)."""
        with self.cond:
            self.fetches += 1
            now = self.clock()
            handoff = self.core.take(slot, now)
            if handoff is not None:
                return handoff.ad
            if self.core.room(now) <= 0 or not (self.waiting or self.core.asking):
                return None
            # Room and a lane that could ask: wake it and wait a little for its task.
            asks_before = self.core.asks
            self.cond.notify_all()
            deadline = now + self.fetch_wait
            while True:
                if self.core.fitting():
                    taken = self.core.take(slot_left(slot, self.core.free), self.clock())
                    return taken.ad if taken is not None else None
                asked = self.core.asks > asks_before
                if (asked and not self.core.asking) or self.core.closed:
                    return None  # the lanes asked and got nothing
                left = deadline - self.clock()
                if left <= 0:
                    return None
                self.cond.wait(min(left, 0.2))

    def secret_ok(self, key: Key, secret: object) -> bool:
        with self.cond:
            return self.core.secret_ok(key, secret)

    def starter_of(self, key: Key) -> int | None:
        with self.cond:
            return self.core.starter_of(key)

    def replied(self, key: Key, accepted: bool) -> None:
        self._change(lambda now: self.core.replied(key, accepted, now))

    def prepared(self, key: Key, starter: int) -> bool:
        ok = self._change(lambda now: self.core.prepared(key, starter, now))
        if ok:
            log.info("task %s started by the startd (starter %d)", key[0], starter)
        return ok

    def evicting(self, key: Key) -> None:
        with self.cond:
            self.core.evicting(key)

    def exited(self, key: Key, reason: str, exit_code: int | None, signal: int | None) -> None:
        self._change(lambda now: self.core.exited(key, reason, exit_code, signal, now))

    def killed(self, key: Key, why: str) -> None:
        with self.cond:
            self.core.killed(key, why)

    def close(self, why: str) -> list[Key]:
        """No more tasks: lanes stop asking, offered tasks are cancelled."""
        return self._change(lambda now: self.core.close(why, now))

    def busy(self) -> int:
        """Tasks the startd has (handed, accepted, running)."""
        with self.cond:
            return sum(1 for h in self.core.tasks.values() if h.stage in _WITH_STARTD)

    def status(self) -> dict[str, Any]:
        """A summary for the log and for debugging: counts only (any process of the glidein's
        user may ask; no task is named)."""
        with self.cond:
            now = self.clock()
            stages: dict[str, int] = {}
            for handoff in self.core.tasks.values():
                stages[handoff.stage.value] = stages.get(handoff.stage.value, 0) + 1
            return {
                "closed": self.core.closed,
                "room": self.core.room(now),
                "free": list(self.core.free) if self.core.free else None,
                "asking": self.core.asking,
                "waiting": self.waiting,
                "fetches": self.fetches,
                "tasks": stages,
            }


def slot_left(slot: SlotView, free: tuple[int, int, int] | None) -> SlotView:
    """The slot as the board's running count has it (what it saw less what it handed out)."""
    if free is None:
        return slot
    cpus, memory, disk = free
    return SlotView(slot.name, cpus, memory, disk, slot.total_cpus, slot.total_memory)


_WITH_STARTD = (Stage.HANDED, Stage.ACCEPTED, Stage.RUNNING)
