"""The successors a master knows of, and whether a round needs a ``sync`` (pure;
``agent.master`` and the simulator's master drive it).

Delgado Peris 2014 §III.B-C: each round the master fetches the site's runnable tasks from the
Task Queue and broadcasts them.  Most rounds of a busy site are triggered by completions, and a
completion's new runnable tasks are mostly its own successors (the next step of a chain reads
what the finished task wrote, in the finished worker's cache).  The Task Queue names them when it
accepts a pair (``Placed.successors``: the waiting tasks that task's success alone releases), so
the master knows them in advance, and a round whose idle workers they cover needs no ``sync``:
it broadcasts them, and its ``assign`` carries the completions (recorded first, which queues the
successors).

When every idle worker is one whose completion released a successor (a chain's next step), the
round needs no TaskList either (:meth:`OfferStock.direct`): each such worker gets a successor of
its own task, whose input is in its cache; the Task Queue checked that pair both ways when it
named the successor (the successor matched the pilot its task went to) and checks it again on
``assign``.  The workers' ranking is what finds that pair in the paper's round; here it is
known.

A completion's successors are offered in the round that carries it, and only there: those no
pair took are queued at the Task Queue, whose ``sync`` offers them as it offers any task (it
holds a task whose input's holder is busy for a while, waitForData, where a later round from the
stock would give it to whichever worker is idle).  A completion of a task that feeds other
waiting tasks too (a merge that needs other tasks' outputs, ``Placed.more``) makes the next round
``sync``: only the Task Queue knows whether it released them.

Python 3.9, standard library only.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Generic, Protocol, TypeVar

# Placed tasks remembered for their successors; past this the oldest are forgotten (a task whose
# worker died, or that another master reported, never completes here).
REMEMBERED = 65536


class HasTaskId(Protocol):
    @property
    def task_id(self) -> int: ...


OfferT = TypeVar("OfferT", bound=HasTaskId)


class OfferStock(Generic[OfferT]):
    """The successors of the tasks the master placed, released by their completions."""

    def __init__(self) -> None:
        # a placed task -> its successors, and whether it feeds other waiting tasks too
        self._expected: dict[int, tuple[tuple[OfferT, ...], bool]] = {}
        self._released: dict[int, OfferT] = {}  # successors of completed tasks, for this round
        self._holder: dict[int, int] = {}  # a released successor -> the worker that made its input
        self._stale = False  # a completion may have released tasks only a sync shows

    def placed(self, task_id: int, successors: Sequence[OfferT] = (), more: bool = False) -> None:
        """The Task Queue accepted a pair: the task's successors are expected when it
        completes; ``more``: other waiting tasks read its outputs and need more than its
        success (or do not fit the site): its completion may release them, and only a sync
        shows which."""
        self._released.pop(task_id, None)
        self._holder.pop(task_id, None)
        self._expected[task_id] = (tuple(successors), more)
        while len(self._expected) > REMEMBERED:
            del self._expected[next(iter(self._expected))]

    def completed(self, task_id: int, ok: bool, pilot: int | None = None) -> None:
        """Worker ``pilot`` reported the task's end: on success its successors join the stock.
        Once per task: a resend, or a completion already seen, changes nothing."""
        successors, more = self._expected.pop(task_id, ((), False))
        if ok:
            self._stale = self._stale or more
            for offer in successors:
                if offer.task_id not in self._released and pilot is not None:
                    self._holder[offer.task_id] = pilot
                self._released.setdefault(offer.task_id, offer)

    def forget(self, task_id: int) -> None:
        """The task will not complete here (released, its worker dead), or its completion goes
        up by a ``sync``: its successors are not expected."""
        self._expected.pop(task_id, None)

    def current(self) -> list[OfferT]:
        """What a round may offer without a ``sync``: the released successors."""
        return list(self._released.values())

    def covers(self, idle: int) -> bool:
        """Whether the released successors give each of ``idle`` workers a choice, and no
        completion may have released tasks the stock does not know: the round needs no
        ``sync``."""
        return idle > 0 and not self._stale and len(self._released) >= idle

    def direct(self, idle: Collection[int]) -> list[tuple[OfferT, int]] | None:
        """The round's pairs without a TaskList: when each idle worker made the input of a
        released successor (and no completion may have released tasks the stock does not
        know), each gets the first such successor; None otherwise (the round ranks)."""
        if not idle or self._stale:
            return None
        own: dict[int, OfferT] = {}
        for task_id, offer in self._released.items():
            holder = self._holder.get(task_id)
            if holder is not None and holder not in own:
                own[holder] = offer
        if not set(idle) <= own.keys():
            return None
        return [(own[pilot], pilot) for pilot in sorted(idle)]

    def round_ended(self) -> None:
        """A round is over (or a ``sync`` answered): the successors it did not place are the
        Task Queue's to offer."""
        self._released.clear()
        self._holder.clear()
        self._stale = False

    @property
    def expected(self) -> int:
        """Placed tasks whose completion may release successors."""
        return len(self._expected)
