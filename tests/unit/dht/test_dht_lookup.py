"""The iterative lookup (Kademlia section 2.3), driven synchronously over a model network."""

from __future__ import annotations

import random

import pytest

from glidein_ext.dht.contact import Contact
from glidein_ext.dht.ids import ID_BITS
from glidein_ext.dht.lookup import Lookup
from glidein_ext.dht.routing import RoutingTable
from tests.support.dht_model import model_tables

K = 8


def network(n: int, seed: int) -> dict[int, RoutingTable]:
    rng = random.Random(seed)
    return model_tables([rng.getrandbits(ID_BITS) for _ in range(n)], K, rng)


def network_and_target(seed: int) -> tuple[dict[int, RoutingTable], list[int], int]:
    """A network of 300 (:func:`network`), its ids, and a target drawn from ``seed``."""
    tables = network(300, seed)
    return tables, list(tables), random.Random(seed).getrandbits(ID_BITS)


def drive(lookup: Lookup, tables: dict[int, RoutingTable], dead: set[int]) -> None:
    while batch := lookup.next_batch():
        for contact in batch:
            if contact.id in dead:
                lookup.failed(contact)
            else:
                lookup.answered(contact, tables[contact.id].closest(lookup.target, K))


@pytest.mark.parametrize("seed", range(5))
def test_finds_the_true_closest(seed: int) -> None:
    tables = network(300, seed)
    rng = random.Random(seed)
    own = rng.choice(list(tables))
    target = rng.getrandbits(ID_BITS)
    lookup = Lookup(target, tables[own].closest(target, K), own_id=own, width=K, alpha=3)
    drive(lookup, tables, set())
    expected = sorted((i for i in tables if i != own), key=lambda i: i ^ target)[:K]
    assert [c.id for c in lookup.closest(K)] == expected
    assert lookup.done
    assert 1 <= lookup.rounds <= lookup.queried
    assert lookup.queried < 60  # far fewer than the 300 nodes


def test_dead_nodes_are_passed_over() -> None:
    tables, ids, target = network_and_target(7)
    own = ids[0]
    truly_closest = sorted(ids[1:], key=lambda i: i ^ target)
    dead = set(truly_closest[:3])
    lookup = Lookup(target, tables[own].closest(target, K), own_id=own, width=K, alpha=3)
    drive(lookup, tables, dead)
    found = [c.id for c in lookup.closest(K)]
    # Answers name the dead nodes too (nobody knows yet), so the width may not be filled up.
    assert len(found) >= K - len(dead)
    assert found == [i for i in truly_closest if i not in dead][: len(found)]


def test_contacts_we_know_to_be_dead_are_not_asked_again() -> None:
    # others still name the dead nodes; a node that knows better skips them.
    tables, ids, target = network_and_target(8)
    own = ids[0]
    dead = set(sorted(ids[1:], key=lambda i: i ^ target)[:3])
    seeds = [c for c in tables[own].closest(target, K) if c.id not in dead]
    asked: list[int] = []
    lookup = Lookup(target, seeds, own_id=own, width=K, alpha=3, avoid=lambda ident: ident in dead)
    while batch := lookup.next_batch():
        for contact in batch:
            asked.append(contact.id)
            lookup.answered(contact, tables[contact.id].closest(target, K))
    assert not dead & set(asked)
    found = [c.id for c in lookup.closest(K)]
    live = sorted((i for i in ids[1:] if i not in dead), key=lambda i: i ^ target)
    assert len(found) >= K - len(dead)
    assert found == live[: len(found)]


def test_settled_counts_only_the_closest_candidates() -> None:
    target = 0
    near, far = Contact(1, "h", 1), Contact(1 << 100, "h", 2)
    lookup = Lookup(target, [far, near], own_id=1 << 150, width=2, alpha=1)
    assert lookup.next_batch() == [near]
    lookup.answered(near, [])
    assert lookup.settled(1)
    assert not lookup.settled(2)
    assert not lookup.done
    assert lookup.next_batch() == [far]
    lookup.answered(far, [])
    assert lookup.done
    assert lookup.next_batch() == []


def test_self_and_excluded_ids_are_never_asked() -> None:
    own = Contact(5, "h", 1)
    other = Contact(6, "h", 2)
    gone = Contact(7, "h", 3)
    lookup = Lookup(0, [own, other, gone], own_id=5, width=8, alpha=3, exclude=[7])
    assert lookup.next_batch() == [other]
