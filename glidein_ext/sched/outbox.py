"""A worker's completions until the Task Queue has them (Delgado Peris 2014 §III.B-C), pure.

A worker hands each completion to its master, which holds it until its next Task Queue call
(``sync``).  A master can step down or die in between (a slow master superseded under load, a
killed one): what it held is gone.  So the worker keeps each completion here until a master
answers that the Task Queue has it (``done`` answered ``"synced"``), resends all of them to each
new master, and resends those not acknowledged for ``resend_after`` seconds to the current one
(it may be a master that stepped down since, or the datagram may have been lost).  A resend the
master holds already is answered and dropped there, so resends cost datagrams, never duplicates.

Python 3.9, standard library only.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

Key = tuple[int, int]  # (task id, attempt)
# Completions kept.  A worker runs one task at a time, and learns that the Task Queue has its
# completion from the resend ``resend_after`` seconds later: it holds what it finished in that
# time, a handful for tasks of minutes, 40-60 for trivial tasks (16-20 a second).
LIMIT = 256

log = logging.getLogger("glidein_ext.sched.outbox")


class Outbox:
    """The unacknowledged completions of one worker, oldest first."""

    def __init__(self, resend_after: float, limit: int = LIMIT) -> None:
        self.resend_after = resend_after
        self.limit = limit
        self._items: OrderedDict[Key, tuple[Any, float]] = OrderedDict()  # completion, sent at

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def add(self, key: Key, completion: Any, now: float) -> None:
        """A completion about to be sent (again: a resend keeps its place)."""
        if key in self._items:
            self._items[key] = (completion, now)
            return
        self._items[key] = (completion, now)
        while len(self._items) > self.limit:
            lost, _ = self._items.popitem(last=False)
            log.warning("task %s attempt %s: no master acknowledged its completion", *lost)

    def sent(self, key: Key, now: float) -> None:
        """It was sent (again) at ``now``."""
        item = self._items.get(key)
        if item is not None:
            self._items[key] = (item[0], now)

    def acked(self, key: Key) -> None:
        """A master says the Task Queue has it: forget it."""
        self._items.pop(key, None)

    def everything(self) -> list[tuple[Key, Any]]:
        """All of them, for a new master."""
        return [(key, completion) for key, (completion, _) in self._items.items()]

    def due(self, now: float) -> list[tuple[Key, Any]]:
        """Those not sent for ``resend_after`` seconds."""
        return [
            (key, completion)
            for key, (completion, at) in self._items.items()
            if now - at >= self.resend_after
        ]
