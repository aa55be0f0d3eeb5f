"""The iterative node lookup as a pure state machine (Kademlia paper, section 2.3).

The initiator keeps a shortlist ordered by distance to the target, asks up to ``alpha`` of the
closest not-yet-asked candidates at a time, merges the contacts they return, and stops when the
``width`` closest candidates that did not fail have all answered.  When a round brings no candidate
closer than the closest one already seen, the next round asks every candidate among the ``width``
closest not asked yet (Kademlia section 2.3: "the initiator resends the FIND_NODE to all of the k
closest nodes it has not already queried"): the same requests, in fewer rounds.  A value lookup
may stop earlier: once values were found and the ``replication`` closest candidates have answered
(with append, Delgado Peris 2014 §III.A, the values of those nodes are the key's replica list).
The async driver lives in ``node.py``; this class only decides whom to ask next.

Beyond the paper: contacts that other nodes report but that we know to be suspect or dead
(``avoid``, from our routing table) are not asked, so a node that has noticed a death does not pay
a timeout again because its peers have not noticed yet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from glidein_ext.dht.contact import Contact
from glidein_ext.dht.protocol import WireValue

T = TypeVar("T")


class Lookup:
    """The shortlist of one lookup for ``target``."""

    def __init__(
        self,
        target: int,
        seeds: Iterable[Contact],
        *,
        own_id: int,
        width: int,
        alpha: int,
        exclude: Iterable[int] = (),
        avoid: Callable[[int], bool] | None = None,
    ) -> None:
        self.target = target
        self._avoid = avoid
        self.width = width
        self.alpha = alpha
        self._skip = {own_id, *exclude}
        self._known: dict[int, Contact] = {}
        self._asked: set[int] = set()
        self._answered: set[int] = set()
        self._failed: set[int] = set()
        self._best_asked: int | None = None  # distance of the closest candidate at the last round
        self.rounds = 0
        self.add(seeds)

    def add(self, contacts: Iterable[Contact]) -> None:
        """Merge contacts learned from an answer; ourselves and excluded ids are ignored."""
        for contact in contacts:
            if contact.id not in self._skip and contact.id not in self._known:
                self._known[contact.id] = contact

    def _live_closest(self, count: int) -> list[Contact]:
        live = [c for c in self._known.values() if c.id not in self._failed]
        live.sort(key=lambda c: c.id ^ self.target)
        return live[:count]

    def next_batch(self) -> list[Contact]:
        """Up to ``alpha`` unasked candidates among the ``width`` closest (all of them when the
        last round brought nobody closer); counts a round."""
        closest = self._live_closest(self.width)
        batch = [c for c in closest if c.id not in self._asked]
        best = closest[0].id ^ self.target if closest else None
        if self._best_asked is None or best is None or best < self._best_asked:
            batch = batch[: self.alpha]
        if batch:
            self.rounds += 1
            self._asked.update(c.id for c in batch)
            self._best_asked = best
        return batch

    def answered(self, contact: Contact, contacts: Iterable[Contact]) -> None:
        """``contact`` answered with ``contacts``; those we are to avoid are left out."""
        self._answered.add(contact.id)
        avoid = self._avoid
        self.add(contacts if avoid is None else (c for c in contacts if not avoid(c.id)))

    def failed(self, contact: Contact) -> None:
        self._failed.add(contact.id)

    def settled(self, count: int) -> bool:
        """True when the ``count`` closest live candidates have all answered."""
        return all(c.id in self._answered for c in self._live_closest(count))

    @property
    def done(self) -> bool:
        return self.settled(self.width)

    def closest(self, count: int) -> list[Contact]:
        """The ``count`` closest candidates that answered."""
        answered = [self._known[i] for i in self._answered]
        answered.sort(key=lambda c: c.id ^ self.target)
        return answered[:count]

    @property
    def queried(self) -> int:
        return len(self._asked)


def pairs(contacts: Sequence[Contact], replies: Sequence[T]) -> list[tuple[Contact, T]]:
    """zip(strict=True) for Python 3.9: each contact asked with its answer."""
    if len(contacts) != len(replies):
        raise RuntimeError("one answer per contact asked")
    return [(contacts[i], replies[i]) for i in range(len(contacts))]


def merge_values(values: dict[bytes, WireValue], found: Iterable[WireValue]) -> None:
    """Add ``found`` to ``values`` (by bytes), keeping the longest remaining lifetime."""
    for v in found:
        old = values.get(v.data)
        if old is None or old.ttl < v.ttl:
            values[v.data] = v
