"""The successors a master knows of, the last ``sync``'s spare offers, and the rounds that need
no ``sync`` (pure; ``distributed.master`` and the simulator's master drive it).

Delgado Peris 2014 §III.B-C: each round the master fetches the site's runnable tasks from the
Task Queue, broadcasts them as a TaskList, and assigns by the workers' ranks.  Most rounds of a
busy site are triggered by completions, and a completion's new runnable tasks are mostly its own
successors: the next step of a chain reads what the finished task wrote, in the finished worker's
cache.  The Task Queue names them when it accepts a pair (``Placed.successors``: the waiting
tasks that task's success alone releases, each matching the pilot it went to both ways), so the
master knows them before the completion comes.

When every idle worker is one whose completion released a successor, the round is known
(:meth:`OfferStock.direct`): each such worker gets a successor of its own task, whose input is in
its cache -- the pair the workers' ranks choose in the paper's round.  Such a round makes no
``sync`` and broadcasts no TaskList; its ``assign`` carries the completions, which the Task
Queue records before it checks the pairs (that queues the successors and frees the workers).
In any other round the idle makers get their successors the same way (:meth:`OfferStock.mine`)
and the other idle workers rank the rest of the TaskList (:meth:`OfferStock.others`): not
another worker's successor while that worker is idle (of a split's two readers offered while
their maker is idle, the maker takes one and the other waits for it, as the pre-DHT Task Queue
holds a task for its input's idle holder, waitForData).  A successor a round did not place (a
split's second reader: its maker took the first) is queued at the Task Queue; the stock holds
it, and the maker's next round gets it without a ``sync`` (the oldest it holds first, as the
Task Queue's offers would come), unless a ``sync``'s offers placed it meanwhile (another idle
worker ranked it: while its maker is busy it is the Task Queue's to offer, by age) or ``hold``
seconds passed; a pair the Task Queue refuses (another site took the task) costs an idle
round, nothing more.  A completion of a task that feeds other waiting tasks too
(``Placed.more``) makes the next round ``sync``: only the Task Queue knows whether it released
them.

The workers without a successor of their own need the Task Queue's offers.  A ``sync`` asks
for several per idle worker (``sched.rounds.WANT_PER_IDLE``); those no round placed are the
next rounds' spares (:meth:`OfferStock.spares`): a round whose idle workers are no more than
the spares, within ``spare`` seconds (a heartbeat) of the ``sync``, ranks them without a new
one, its ``assign`` carrying the completions.  The Task Queue offers each task first to the
site whose share it is (``sched.offers``) and marks the others' (``TaskOffer.shared``), which
are kept for no later round: another site seldom takes a spare meanwhile, and a refused pair
drops it.  At a site whose completions trickle in, most rounds place one or two tasks: with
the spares they cost one call, not two.

A merge (a task reading the outputs of several unfinished tasks) is a *joint* successor of each
of them: the Task Queue names it with the other tasks it still needs (``Placed.needs``).  The
last of them to complete here releases it, when the master saw the others succeed here too; when
one of them is neither placed here nor seen to succeed here (it runs at another site, or is not
placed yet), the completion makes the round ``sync``, as before.  While another of them runs
here, a completion releases nothing (:meth:`OfferStock.quiet`): at a site with nothing
runnable it waits for the next call instead of bringing a round.

Python 3.9, standard library only.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Generic, Protocol, TypeVar

# Placed tasks remembered for their successors; past this the oldest are forgotten (a task whose
# worker died, or that another master reported, never completes here).
REMEMBERED = 65536
HOLD = 3600.0  # seconds a successor left by its round waits for its busy maker here
SPARE = 20.0  # seconds a sync's offers no round placed serve the next rounds (a heartbeat)


class HasTaskId(Protocol):
    @property
    def task_id(self) -> int: ...


OfferT = TypeVar("OfferT", bound=HasTaskId)


class OfferStock(Generic[OfferT]):
    """The successors of the tasks the master placed, released by their completions."""

    def __init__(self, hold: float = HOLD, spare: float = SPARE) -> None:
        self.hold = hold
        self.spare = spare
        # a placed task -> its successors, whether it feeds other waiting tasks too, and what
        # else each successor needs (the other unfinished tasks of a merge; empty: nothing)
        self._expected: dict[int, tuple[tuple[OfferT, ...], bool, tuple[tuple[int, ...], ...]]] = {}
        self._succeeded: dict[int, None] = {}  # tasks seen to succeed here, the latest last
        self._released: dict[int, OfferT] = {}  # successors of completed tasks, for this round
        self._holder: dict[int, int] = {}  # a released successor -> the worker that made its input
        self._stale = False  # a completion may have released tasks only a sync shows
        # successors earlier rounds left, for their makers: task -> (offer, maker, since)
        self._held: dict[int, tuple[OfferT, int, float]] = {}
        # the last sync's offers that no round placed yet, and when that sync answered
        self._spares: dict[int, OfferT] = {}
        self._spared_at = 0.0

    def placed(
        self,
        task_id: int,
        successors: Sequence[OfferT] = (),
        more: bool = False,
        needs: Sequence[Sequence[int]] = (),
    ) -> None:
        """The Task Queue accepted a pair: the task's successors are expected when it
        completes; ``more``: other waiting tasks read its outputs and need more than its
        success (or do not fit the site): its completion may release them, and only a sync
        shows which; ``needs``: for each successor, the other tasks it still waits for (none
        when empty)."""
        self._released.pop(task_id, None)
        self._holder.pop(task_id, None)
        self._held.pop(task_id, None)
        self._spares.pop(task_id, None)
        self._succeeded.pop(task_id, None)  # placed again: it has not succeeded (yet)
        joint = tuple(tuple(n) for n in needs) or ((),) * len(successors)
        self._expected[task_id] = (tuple(successors), more, joint)
        while len(self._expected) > REMEMBERED:
            del self._expected[next(iter(self._expected))]

    def completed(self, task_id: int, ok: bool, pilot: int | None = None) -> None:
        """Worker ``pilot`` reported the task's end: on success the successors it releases join
        the stock (a merge's once every task it needs succeeded here); a failure makes the next
        round sync (the Task Queue may queue the task again).  Once per task: a resend, or a
        completion already seen, changes nothing."""
        if task_id not in self._expected:
            return
        successors, more, needs = self._expected.pop(task_id)
        if not ok:  # retried, the task is queued again: only a sync shows it
            self._stale = True
            return
        self._succeeded[task_id] = None
        while len(self._succeeded) > REMEMBERED:
            del self._succeeded[next(iter(self._succeeded))]
        self._stale = self._stale or more
        for offer, others in zip(successors, needs):
            if not all(other in self._succeeded for other in others):
                # One of them will release it here; one of them not placed here: a sync shows.
                self._stale = self._stale or not all(
                    other in self._succeeded or other in self._expected for other in others
                )
                continue
            if offer.task_id not in self._released and pilot is not None:
                self._holder[offer.task_id] = pilot
            self._released.setdefault(offer.task_id, offer)

    def forget(self, task_id: int) -> None:
        """The task will not complete here (released, its worker dead), or its completion goes
        up by a ``sync``: its successors are not expected."""
        self._expected.pop(task_id, None)

    def quiet(self, task_id: int, pilot: int | None = None, finished: Collection[int] = ()) -> bool:
        """The task was placed here, its success releases no waiting task now, and no
        successor is held for its worker ``pilot`` (whose next round would get it).  A merge
        is not released while another task it needs runs here (placed here, and not among
        ``finished``: the tasks whose completions the master holds): that one's completion
        will release it."""
        expected = self._expected.get(task_id)
        if expected is None or expected[1]:
            return False
        successors, _, needs = expected
        for _, others in zip(successors, needs):
            if not any(other in self._expected and other not in finished for other in others):
                return False
        return pilot is None or all(maker != pilot for _, maker, _ in self._held.values())

    def direct(self, idle: Collection[int], dry: bool = False) -> list[tuple[OfferT, int]] | None:
        """The round's pairs, without a ``sync`` or a TaskList: when each idle worker made the
        input of a successor held or released here (and no completion may have released tasks
        the stock does not know), each gets the oldest such successor; None otherwise (the
        round syncs and ranks: an idle worker without a successor of its own gets what the Task
        Queue offers, not another worker's successor, which the Task Queue holds for its
        input's maker).  ``dry``: the Task Queue had nothing runnable for the site at its last
        answer, so when every released successor goes to its maker there is nothing to offer
        the other idle workers: they stay idle."""
        if not idle or self._stale:
            return None
        pairs = self.mine(idle)
        chosen = {offer.task_id for offer, _ in pairs}
        everyone = len(pairs) == len(idle)
        if not pairs or not (everyone or (dry and chosen >= self._released.keys())):
            return None
        for task_id in chosen:  # placed now, or refused: the Task Queue's either way
            self._held.pop(task_id, None)
        return pairs

    def offered(self, offers: Sequence[OfferT], now: float) -> None:
        """A ``sync`` answered with these offers: those no round places are the spares of the
        next rounds, for ``spare`` seconds (:meth:`spares`)."""
        self._spares = {offer.task_id: offer for offer in offers}
        self._spared_at = now

    def refused(self, task_ids: Collection[int] | None = None) -> None:
        """The Task Queue refused pairs of these tasks (another site took them, or they fit
        the pilot no more): they are neither spares nor successors kept for a maker; None: a
        round's workers took none of the spares (they fit no idle worker): none is, the next
        round syncs."""
        if task_ids is None:
            self._spares.clear()
        for task_id in task_ids or ():
            self._spares.pop(task_id, None)
            self._held.pop(task_id, None)
            self._released.pop(task_id, None)
            self._holder.pop(task_id, None)

    def _own(self, idle: Collection[int]) -> dict[int, OfferT]:
        """Each idle worker that made the input of a successor held or released here, and the
        oldest such successor."""
        own: dict[int, OfferT] = {}
        for offer, maker, _ in self._held.values():  # the oldest first
            if maker in idle:
                own.setdefault(maker, offer)
        for task_id, offer in self._released.items():
            holder = self._holder.get(task_id)
            if holder is not None and holder in idle:
                own.setdefault(holder, offer)
        return own

    def mine(self, idle: Collection[int]) -> list[tuple[OfferT, int]]:
        """The pairs of a ranked round's idle workers that made the input of a successor
        held or released here: each gets the oldest (its input is in its cache: the pair its
        rank would choose); the other idle workers rank the rest (:meth:`others`)."""
        own = self._own(idle)
        return [(own[pilot], pilot) for pilot in sorted(own)]

    def others(self, offers: Iterable[OfferT], idle: Collection[int]) -> list[OfferT]:
        """The offers the workers without a successor of their own rank: not the successors
        released or held for the idle workers that made their inputs (:meth:`mine`).  Of a
        split's two readers offered while their maker is idle, the maker takes one and the
        other waits for it, as the pre-DHT Task Queue holds a task for an idle holder of its
        input (waitForData), where a ranked round would give it to another idle worker.  A
        successor held for a busy maker is the Task Queue's to offer (by age, after the older
        tasks), as it offers it."""
        theirs = {task_id for task_id in self._released if task_id in self._holder}
        theirs.update(t for t, (_, maker, _) in self._held.items() if maker in idle)
        return [offer for offer in offers if offer.task_id not in theirs]

    def spares(self, idle: Collection[int], now: float) -> list[OfferT] | None:
        """A TaskList for a round without a ``sync``: the last sync's offers no round placed
        (:meth:`others` of them), when there are at least as many as idle workers without a
        successor of their own (:meth:`mine`), that sync was at most ``spare`` seconds ago,
        and no completion may have released tasks the stock does not know; None otherwise
        (the round syncs).  The workers rank it as any TaskList.  Most rounds of a site whose
        completions trickle in place one or two tasks: a ``sync`` asks for several per idle
        worker, and the next rounds rank those left (the Task Queue offers a task first to
        the site whose share it is, ``sched.offers``, so that another site seldom took them
        meanwhile)."""
        if not idle or self._stale or not self._spares or now - self._spared_at > self.spare:
            return None
        spare = self.others(self._spares.values(), idle)
        if len(spare) < len(idle) - len(self._own(idle)):
            return None
        return spare

    def round_ended(self, now: float) -> int:
        """A round is over (or a ``sync`` answered): the successors it did not place are held
        for their makers (and are queued at the Task Queue); how many there are (the site is
        not dry).  Those held ``hold`` seconds are the Task Queue's alone."""
        left = len(self._released)
        for task_id, offer in self._released.items():
            holder = self._holder.get(task_id)
            if holder is not None and task_id not in self._held:
                self._held[task_id] = (offer, holder, now)
        while self._held:
            oldest = next(iter(self._held))
            if now - self._held[oldest][2] <= self.hold and len(self._held) <= REMEMBERED:
                break
            del self._held[oldest]
        self._released.clear()
        self._holder.clear()
        self._stale = False
        return left

    @property
    def stale(self) -> bool:
        """A completion may have released tasks that only a ``sync`` shows."""
        return self._stale

    @property
    def held(self) -> int:
        """Successors held for their busy makers."""
        return len(self._held)

    @property
    def expected(self) -> int:
        """Placed tasks whose completion may release successors."""
        return len(self._expected)
