"""Reply aggregation at one node of a broadcast tree (Delgado Peris 2014, section III.B).

"Each receiving node keeps a table of expected replies and a pointer to its parent node.  When all
the replies are received, or after some timeout, dependent on the node's depth in the broadcast
tree, the aggregated result is sent back to the parent.  Late messages are simply discarded."

A child that did not acknowledge in time is given up: its region is covered again through other
contacts (``broadcaster``).  It may only have been slow (a loaded machine, a lost acknowledgement):
then it handled the message, nodes of its region answer it rather than us (they say they had the
message already), and its reply still counts while the table is open -- every node answers one
parent, so nothing is counted twice.  Once a node of its region says it had the message, the
table waits for the child's reply (until the timeout); without it the answers of the nodes that
went to the child are missing, and the subtree is not whole.

A node that has no handler for the topic cannot combine; it passes its children's answers up as
a list of parts (``merged`` is False) and its parent adds them to its own list.

The depth-dependent timeout is a budget: the root waits ``timeout``; each child is given what its
parent has left minus a hop margin, so every node answers before its parent gives up.  Answers are
values that can travel (see ``wire``); ``None`` means "nothing to report" and is left out of the
aggregation.  Pure code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Combine = Callable[[list[Any]], Any]
"""Folds a subtree's answers into one (e.g. ``sum``); the result must travel (``wire``)."""


def child_budget(remaining: float, hop_margin: float) -> float:
    """Time a child gets to answer: what we have left, minus a margin for the hop back."""
    return remaining - min(hop_margin, remaining / 4)


class Aggregation:
    """The table of expected replies of one broadcast at one node."""

    def __init__(self, combine: Combine | None, own_answer_pending: bool) -> None:
        self._combine = combine
        self._expected: set[int] = set()
        self._given_up: set[int] = set()
        self._stale: set[int] = set()  # given-up children some of whose region answers them
        self._answers: list[Any] = []
        self._own_pending = own_answer_pending
        self._partial = False
        self.finished = False
        self.late = 0

    def expect(self, child: int) -> None:
        """A child was sent the broadcast: wait for its reply."""
        if not self.finished:
            self._expected.add(child)

    def forget(self, child: int) -> None:
        """A child already had the message, or died and its region was given to others."""
        self._expected.discard(child)

    def give_up(self, child: int) -> None:
        """A child did not acknowledge in time; its region was given to others, but its reply
        is still taken while the table is open (it may have been slow, not dead)."""
        if child in self._expected:
            self._expected.discard(child)
            self._given_up.add(child)

    def stale(self, child: int) -> None:
        """A node of the given-up ``child``'s region had the message already: it answers the
        child (or a node below it), so the subtree is whole only if the child's reply comes."""
        self._stale.add(child)

    def own_answer(self, value: Any) -> None:
        """This node's own answer (from the caller-given handler)."""
        if self.finished:
            self.late += 1
            return
        self._own_pending = False
        if value is not None:
            self._answers.append(value)

    def reply(self, child: int, value: Any, complete: bool = True, merged: bool = True) -> bool:
        """A child's aggregated reply; False when it is late, unexpected or a duplicate.

        ``complete`` is False when some node of the child's subtree did not answer in time;
        ``merged`` is False when ``value`` is a list of uncombined parts.
        """
        if self.finished or (child not in self._expected and child not in self._given_up):
            self.late += 1
            return False
        self._expected.discard(child)
        self._given_up.discard(child)
        self._partial = self._partial or not complete
        if not merged:
            self._answers.extend(v for v in value if v is not None)
        elif value is not None:
            self._answers.append(value)
        return True

    @property
    def merged(self) -> bool:
        """Whether :meth:`finish` combines the answers (else it returns them as parts)."""
        return self._combine is not None

    @property
    def pending(self) -> int:
        return len(self._expected) + (1 if self._own_pending else 0)

    @property
    def complete(self) -> bool:
        """Nothing more to wait for (before the timeout): no expected reply, our own answer in,
        and no given-up child whose region's nodes answered it (its reply would bring them)."""
        return not self._expected and not self._own_pending and not (self._stale & self._given_up)

    @property
    def whole(self) -> bool:
        """Every node of the subtree answered: nothing pending and no child reported a gap."""
        return self.complete and not self._partial

    def finish(self) -> Any:
        """Close the table (later replies are dropped) and return the aggregated answer.

        Without a combine function: the list of parts (see :attr:`merged`).
        """
        self.finished = True
        self._expected.clear()
        if self._combine is None:
            return list(self._answers)
        if not self._answers:
            return None
        return self._combine(self._answers)
