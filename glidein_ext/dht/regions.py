"""Broadcast planning: which contact covers which part of the id space (Delgado Peris 2014, section
III.B).

"Each node divides the space it must broadcast to in eight regions and forwards the message at hand
to one of its contacts in each region."  A range is a prefix-aligned block of the id space; the
root's block is the whole space.  A node splits its block into ``regions`` equal blocks and gives
each block that does not contain it to one contact inside it, with that block as the contact's
range.  Its own region it splits again the same way, down to the last contact it knows there, so
blocks are disjoint, every recipient lies in its block, no block holds an earlier sender, and N
nodes cost exactly N-1 messages.

Why not hand the own region to another contact, as the paper's "never more than eight workers"
suggests?  The recipient may know nobody but the sender in part of that region (its bucket there
holds only the sender), and nodes there would be missed; ``tests/unit/dht/test_dht_regions.py``
keeps the three-node counterexample.  Splitting the own region costs the root about
``7 * log8(N)`` messages instead of 8, and makes the tree shallower.

A region with no known contact may still hold nodes: a k-bucket spans several regions and can know
nobody in one of them.  Fallback (DESIGN.md): when one half of a block has no known contact and the
block is not a sibling subtree of our own path (where Kademlia's buckets guarantee a contact when
the subtree is not empty), the whole enclosing block goes to one contact in it, who splits it with
its own, finer, routing table.  Pure code.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from glidein_ext.dht.contact import Contact
from glidein_ext.dht.ids import ID_BITS


@dataclass(frozen=True)
class Block:
    """The ids sharing the first ``prefix_len`` bits of ``low`` (``low`` has zeros after them)."""

    __slots__ = ("low", "prefix_len")

    low: int
    prefix_len: int

    @classmethod
    def whole(cls) -> Block:
        return cls(0, 0)

    @classmethod
    def checked(cls, low: int, prefix_len: int) -> Block:
        """A block from wire values; raises ValueError when they are not a prefix block."""
        if not 0 <= prefix_len <= ID_BITS or not 0 <= low < (1 << ID_BITS):
            raise ValueError("block out of range")
        if low & ((1 << (ID_BITS - prefix_len)) - 1):
            raise ValueError("block low end is not aligned to its prefix")
        return cls(low, prefix_len)

    @property
    def size(self) -> int:
        return 1 << (ID_BITS - self.prefix_len)

    def __contains__(self, ident: object) -> bool:
        return isinstance(ident, int) and self.low <= ident < self.low + self.size

    def halves(self) -> tuple[Block, Block]:
        if self.prefix_len >= ID_BITS:
            raise ValueError("a single id cannot be split")
        half = self.size >> 1
        return Block(self.low, self.prefix_len + 1), Block(self.low + half, self.prefix_len + 1)


@dataclass(frozen=True)
class Delegation:
    """One delegation of a broadcast: send it to ``contact``, who then covers ``block``."""

    contact: Contact
    block: Block


def plan(
    own_id: int,
    block: Block,
    contacts: Sequence[Contact],
    skip: Iterable[int] = (),
    region_bits: int = 3,
) -> list[Delegation]:
    """Split ``block``, which contains ``own_id``, among ``contacts``.

    ``contacts`` are in order of preference (most recently seen first); ``skip`` are ids not to
    use (contacts that just failed).  Returns disjoint blocks, each given to a distinct contact
    inside it; together with ``own_id`` they cover every node of ``block`` that a Kademlia
    routing table lets us reach.
    """
    if own_id not in block:
        raise ValueError("plan() splits a block that contains the planning node")
    excluded = {own_id, *skip}
    candidates = [c for c in contacts if c.id in block and c.id not in excluded]
    found: list[Delegation] = []
    current = block
    depth = 0  # bits consumed in the current group of ``region_bits``
    while candidates and current.prefix_len < ID_BITS:
        low, high = current.halves()
        mine, other = (low, high) if own_id in low else (high, low)
        levels = region_bits - 1 - depth
        found.extend(_delegate(other, levels, [c for c in candidates if c.id in other]))
        candidates = [c for c in candidates if c.id in mine]
        current = mine
        depth = (depth + 1) % region_bits
    return found


def plan_foreign(
    block: Block,
    contacts: Sequence[Contact],
    skip: Iterable[int] = (),
    region_bits: int = 3,
) -> list[Delegation]:
    """Cover a block that does not contain us (a dead child's block) with the contacts left."""
    excluded = set(skip)
    candidates = [c for c in contacts if c.id in block and c.id not in excluded]
    return _delegate(block, region_bits, candidates)


def _delegate(block: Block, levels: int, candidates: list[Contact]) -> list[Delegation]:
    """Give ``block`` (not containing us) to contacts: one per region ``levels`` bits down."""
    if not candidates:
        return []
    if levels <= 0 or block.prefix_len >= ID_BITS:
        return [Delegation(candidates[0], block)]
    parts = []
    for half in block.halves():
        part = _delegate(half, levels - 1, [c for c in candidates if c.id in half])
        if not part:
            # Nobody known in this half, but it is not one of our buckets' subtrees, so it may
            # hold nodes we do not know: the whole block goes to one contact in it (DESIGN.md).
            return [Delegation(candidates[0], block)]
        parts.extend(part)
    return parts
