"""The routing table: k-buckets with least-recently-seen expiration.

Kademlia paper, section 2.2: bucket i holds contacts at XOR distance [2**i, 2**(i+1)), at most k of
them, ordered by the time they were last seen.  The paper keeps the oldest contacts when a bucket is
full; Delgado Peris 2014, section III.A, changes this: "we apply a simple least-recently-seen
expiration
policy", because pilots have a roughly constant lifetime.  So a full bucket evicts its
least-recently-seen contact to make room for the newcomer.  Evicted contacts wait in a small
replacement cache (Kademlia section 4.1) and come back when a bucket loses a member, as suspects
(below) until heard from, since they may have died in the cache; the node pings them
(:meth:`take_promoted`).

A contact is dropped at once when it sends LEAVE (Delgado Peris 2014 §III.A) and after
``stale_after``
consecutive unanswered requests (Kademlia section 4.1).  Beyond the paper, so that pilots killed
without LEAVE stop slowing lookups down at once: a contact that missed one answer is *suspect*.
It moves to the least-recently-seen end of its bucket (the next newcomer evicts it first),
:meth:`closest` and :meth:`contacts` give live contacts before suspects, and lookups skip suspect
ids that other nodes tell them about.  Dropped ids are remembered as dead (a bounded memory) until
they are heard from again, so that the answers of nodes that have not noticed yet do not bring
them back.  Pure code: time is passed in.
"""

from __future__ import annotations

import heapq
import random
from collections import OrderedDict
from collections.abc import Iterable, Iterator

from glidein_ext.dht.contact import Contact
from glidein_ext.dht.ids import ID_BITS, bucket_index

DEAD_MEMORY = 4096
"""Ids remembered as dead, and contacts whose failures are counted, at most (oldest forgotten)."""


class RoutingTable:
    """The k-buckets of one node."""

    def __init__(
        self, own_id: int, k: int, stale_after: int = 3, memory: int = DEAD_MEMORY
    ) -> None:
        self.own_id = own_id
        self.k = k
        self.stale_after = stale_after
        self.memory = memory
        # One ordered map per bucket: least recently seen first.
        self._buckets: list[OrderedDict[int, Contact]] = [OrderedDict() for _ in range(ID_BITS)]
        self._replacements: list[OrderedDict[int, Contact]] = [
            OrderedDict() for _ in range(ID_BITS)
        ]
        self._occupied = 0  # bit i set: bucket i is not empty
        self._seen_seq: dict[int, int] = {}
        self._all: dict[int, Contact] = {}
        # Consecutive unanswered requests, of contacts in the table or met in lookups (bounded).
        self._failures: OrderedDict[int, int] = OrderedDict()
        self._dead: OrderedDict[int, None] = OrderedDict()
        self._promoted: list[Contact] = []
        self._seq = 0
        self._last_lookup: list[float] = [0.0] * ID_BITS

    def __len__(self) -> int:
        return len(self._seen_seq)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._seen_seq

    def get(self, node_id: int) -> Contact | None:
        return self._all.get(node_id)

    def observe(self, contact: Contact) -> Contact | None:
        """Record that ``contact`` was just heard from; return the contact evicted for it."""
        index = bucket_index(self.own_id, contact.id)
        if index < 0:
            return None
        bucket = self._buckets[index]
        self._seq += 1
        self._failures.pop(contact.id, None)
        self._dead.pop(contact.id, None)
        if contact.id in bucket:
            bucket.pop(contact.id)
            bucket[contact.id] = contact  # most recently seen goes last; address may change
            self._seen_seq[contact.id] = self._seq
            self._all[contact.id] = contact
            return None
        self._replacements[index].pop(contact.id, None)
        evicted: Contact | None = None
        if len(bucket) >= self.k:
            # Delgado Peris 2014 §III.A: expire the least-recently-seen contact, not the newcomer.
            _, evicted = bucket.popitem(last=False)
            del self._seen_seq[evicted.id]
            del self._all[evicted.id]
            self._failures.pop(evicted.id, None)
            self._remember_replacement(index, evicted)
        bucket[contact.id] = contact
        self._occupied |= 1 << index
        self._seen_seq[contact.id] = self._seq
        self._all[contact.id] = contact
        return evicted

    def remove(self, node_id: int) -> bool:
        """Drop a contact now (it sent LEAVE, or went stale); promote a replacement."""
        index = bucket_index(self.own_id, node_id)
        self._failures.pop(node_id, None)
        if index < 0:
            return False
        self._replacements[index].pop(node_id, None)
        if self._buckets[index].pop(node_id, None) is None:
            return False
        del self._seen_seq[node_id]
        del self._all[node_id]
        replacements = self._replacements[index]
        if replacements:
            _, back = replacements.popitem(last=True)
            self._buckets[index][back.id] = back
            self._buckets[index].move_to_end(back.id, last=False)  # not seen lately: LRS end
            self._seen_seq[back.id] = 0  # heard from before any mark: the next sweep asks it
            self._all[back.id] = back
            self._failures[back.id] = 1  # suspect until heard from: it may have died meanwhile
            self._promoted.append(back)
        elif not self._buckets[index]:
            self._occupied &= ~(1 << index)
        return True

    def take_promoted(self) -> list[Contact]:
        """Replacements promoted since the last call: not heard from lately, worth a PING."""
        promoted, self._promoted = self._promoted, []
        return [c for c in promoted if c.id in self._all]

    def record_failure(self, node_id: int) -> bool:
        """Count an unanswered request; True when the contact was just declared dead.

        The first failure makes a contact suspect; ``stale_after`` in a row drop it from the
        table and remember it as dead.  Contacts that are not in the table (met in a lookup)
        are counted too.
        """
        if node_id in self._dead or node_id == self.own_id:
            return False
        count = self._failures.pop(node_id, 0) + 1
        if count >= self.stale_after:
            self.mark_dead(node_id)
            return True
        self._failures[node_id] = count
        while len(self._failures) > self.memory:
            self._failures.popitem(last=False)
        if count == 1 and node_id in self._seen_seq:
            # Not heard from when asked: least recently seen now, so evicted first (Delgado Peris
            # 2014 §III.A).
            self._buckets[bucket_index(self.own_id, node_id)].move_to_end(node_id, last=False)
        return False

    def mark_dead(self, node_id: int) -> None:
        """Drop a contact that is gone (stale, LEAVE, another node at its address); remember it."""
        self.remove(node_id)
        self._dead[node_id] = None
        self._dead.move_to_end(node_id)
        while len(self._dead) > self.memory:
            self._dead.popitem(last=False)

    def failures(self, node_id: int) -> int:
        """Consecutive unanswered requests of a contact not (yet) declared dead."""
        return self._failures.get(node_id, 0)

    def has_suspects(self) -> bool:
        """Whether any contact is suspect or remembered as dead."""
        return bool(self._failures or self._dead)

    def is_suspect(self, node_id: int) -> bool:
        """True for a contact that missed its last answer or was declared dead."""
        return node_id in self._failures or node_id in self._dead

    def mark(self) -> int:
        """A point in the table's history, for :meth:`unheard_since`."""
        return self._seq

    def unheard_since(self, mark: int) -> list[Contact]:
        """Contacts not heard from since ``mark`` (most recently seen first)."""
        seq = self._seen_seq
        return [c for c in self.contacts() if seq[c.id] <= mark]

    def closest(self, target: int, count: int, exclude: Iterable[int] = ()) -> list[Contact]:
        """Up to ``count`` contacts closest to ``target`` by XOR distance, live ones first.

        Suspect contacts only fill up the answer when there are too few live ones.  The buckets
        are read in order of distance to ``target`` and only as far as needed, not the whole
        table: with ``i`` the bucket ``target`` falls in, bucket ``i`` holds the contacts within
        ``2**i`` of it, the buckets below ``i`` all lie in ``[2**i, 2**(i+1))``, and each bucket
        ``j > i`` in ``[2**j, 2**(j+1))`` (Kademlia section 2.1: XOR is unidirectional).
        """
        skip = set(exclude)
        failures = self._failures
        buckets = self._buckets
        first = bucket_index(self.own_id, target)

        def distance(contact: Contact) -> int:
            return contact.id ^ target

        live: list[Contact] = []
        for group in self._groups_by_distance(first):
            picked = [c for c in group if c.id not in failures and c.id not in skip]
            if picked:
                picked.sort(key=distance)
                live += picked
                if len(live) >= count:
                    return live[:count]
        if not failures:
            return live
        suspects = [
            c
            for bucket in buckets
            if bucket
            for c in bucket.values()
            if c.id in failures and c.id not in skip
        ]
        return live + heapq.nsmallest(count - len(live), suspects, key=distance)

    def _groups_by_distance(self, first: int) -> Iterator[Iterable[Contact]]:
        """The contacts in groups of increasing distance to an id in bucket ``first`` (-1: our
        own id); within a group, in no particular order."""
        buckets = self._buckets
        occupied = self._occupied
        if first >= 0:
            yield buckets[first].values()
            below: list[Contact] = []
            lower = occupied & ((1 << first) - 1)
            while lower:
                j = lower.bit_length() - 1
                lower ^= 1 << j
                below += buckets[j].values()
            yield below
        higher = occupied >> (first + 1) << (first + 1)
        while higher:
            j = (higher & -higher).bit_length() - 1  # the lowest occupied bucket left
            higher ^= 1 << j
            yield buckets[j].values()

    def contacts(self) -> list[Contact]:
        """Every contact, live ones first, each group most recently seen first."""
        seq = self._seen_seq
        failures = self._failures
        if not failures:
            return sorted(self._all.values(), key=lambda c: seq[c.id], reverse=True)
        return sorted(self._all.values(), key=lambda c: (c.id in failures, -seq[c.id]))

    def bucket_size(self, index: int) -> int:
        """Contacts in bucket ``index``."""
        return len(self._buckets[index])

    def bucket_sizes(self) -> dict[int, int]:
        """Non-empty buckets: index -> number of contacts."""
        return {i: len(b) for i, b in enumerate(self._buckets) if b}

    def note_lookup(self, target: int, now: float) -> None:
        """Remember that a lookup went through the bucket ``target`` falls in (Kademlia 2.3)."""
        index = bucket_index(self.own_id, target)
        if index >= 0:
            self._last_lookup[index] = now

    def buckets_to_refresh(self, now: float, interval: float) -> list[int]:
        """Buckets, from the closest non-empty one outwards, without a lookup for ``interval``.

        Kademlia section 2.3: buckets further away than the closest neighbour are refreshed;
        the ones below it cover id ranges too small to hold other nodes.  Full buckets are left
        out: a lookup there would find nobody we lack room for.
        """
        occupied = [i for i, b in enumerate(self._buckets) if b]
        if not occupied:
            return []
        return [
            i
            for i in range(occupied[0], ID_BITS)
            if now - self._last_lookup[i] >= interval and len(self._buckets[i]) < self.k
        ]

    def random_id_in_bucket(self, index: int, rng: random.Random) -> int:
        """A random id whose distance to ours falls in bucket ``index``."""
        low = 1 << index
        return self.own_id ^ (low | rng.getrandbits(index) if index else low)

    def _remember_replacement(self, index: int, contact: Contact) -> None:
        replacements = self._replacements[index]
        replacements[contact.id] = contact
        while len(replacements) > self.k:
            replacements.popitem(last=False)
