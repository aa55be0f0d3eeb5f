"""Broadcast region planning (Delgado Peris 2014 §III.B) with the DESIGN.md fallback, on model
networks."""

from __future__ import annotations

import random
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glidein_ext.dht.contact import Contact
from glidein_ext.dht.ids import ID_BITS, ID_SPACE
from glidein_ext.dht.regions import Block, Delegation, plan, plan_foreign
from glidein_ext.dht.routing import RoutingTable
from tests.support.dht_model import model_tables


def test_block_halves_and_membership() -> None:
    whole = Block.whole()
    low, high = whole.halves()
    assert low == Block(0, 1)
    assert high == Block(1 << 159, 1)
    assert 5 in low and 5 not in high
    assert (ID_SPACE - 1) in high
    assert "5" not in whole
    single = Block.checked(7, ID_BITS)
    assert single.size == 1
    with pytest.raises(ValueError):
        single.halves()


@pytest.mark.parametrize(("low", "prefix_len"), [(1, 1), (0, 161), (-1, 0), (ID_SPACE, 0)])
def test_checked_rejects_non_prefix_blocks(low: int, prefix_len: int) -> None:
    with pytest.raises(ValueError):
        Block.checked(low, prefix_len)


def contact(ident: int) -> Contact:
    return Contact(ident, "h", 1)


def ident(prefix: str) -> int:
    """An id whose first bits are ``prefix`` and the rest zero."""
    return int(prefix, 2) << (ID_BITS - len(prefix))


def test_eight_regions_one_contact_each_and_the_own_region_split_again() -> None:
    own = 0
    contacts = [contact((r << 157) | 5) for r in range(1, 8)]  # one in each other eighth
    contacts.append(contact(ident("000001")))  # and one in our own eighth
    found = plan(own, Block.whole(), contacts)
    assert [a.block.prefix_len for a in found] == [3, 3, 3, 3, 3, 3, 3, 6]
    assert len({a.block for a in found}) == 8
    assert all(a.contact.id in a.block for a in found)
    assert found[-1] == Delegation(contacts[-1], Block(ident("000001"), 6))


def test_plan_refuses_a_block_without_us() -> None:
    with pytest.raises(ValueError):
        plan(ident("1"), Block(0, 1), [])


def test_fallback_hands_the_enclosing_block_to_a_known_contact() -> None:
    # We know one contact in region 4 (100...) but none in region 5 (101...): region 5 might
    # hold nodes, so the whole half 1... goes to the contact in region 4.
    own = 0
    known = contact(ident("100") | 1)
    assert plan(own, Block.whole(), [known]) == [Delegation(known, Block(1 << 159, 1))]


def test_empty_half_next_to_us_is_trusted_empty() -> None:
    # Kademlia's buckets guarantee a contact in every non-empty sibling subtree of our path,
    # so a sibling with no contact is empty and needs no fallback.
    own = 0
    known = contact(ident("001"))
    assert plan(own, Block.whole(), [known]) == [Delegation(known, Block(ident("001"), 3))]


def test_skipped_contacts_are_not_used() -> None:
    own = 0
    a, b = contact(ident("001")), contact(ident("001") + 1)
    assert [x.contact for x in plan(own, Block.whole(), [a, b], skip=[a.id])] == [b]


def test_foreign_block_goes_whole_to_one_contact_when_a_part_is_unknown() -> None:
    a = contact(ident("1000"))
    assert plan_foreign(Block(1 << 159, 1), [a]) == [Delegation(a, Block(1 << 159, 1))]
    b, c = contact(ident("1100")), contact(ident("1110"))
    d = contact(ident("1010"))
    found = plan_foreign(Block(1 << 159, 1), [a, b, c, d], skip=[c.id])
    assert found == [
        Delegation(a, Block(ident("100"), 3)),
        Delegation(d, Block(ident("101"), 3)),
        Delegation(b, Block(ident("11"), 2)),
    ]


def test_handing_the_own_region_to_a_contact_would_miss_nodes() -> None:
    # Why the own region is split by its owner: with k = 1, C's only contact in the subtree
    # holding A and B is A.  Had A handed its own region (holding B and C) to C, C would
    # skip A, know nobody else there, and B would never get the message.
    a_id, b_id, c_id = ident("010111000011"), ident("010111000100"), ident("010111110101")
    table_c = RoutingTable(c_id, k=1)
    table_c.observe(contact(b_id))
    table_c.observe(contact(a_id))
    assert [x.id for x in table_c.contacts()] == [a_id]
    assert plan(c_id, Block(ident("010"), 3), table_c.contacts(), skip=[a_id]) == []
    # Our planner reaches both from A directly.
    found = plan(a_id, Block.whole(), [contact(c_id), contact(b_id)])
    assert {x.contact.id for x in found} == {b_id, c_id}


def build_tables(ids: list[int], k: int, rng: random.Random) -> dict[int, list[Contact]]:
    """Each node hears from every other in random order: buckets end up with the k last seen."""
    return {own: table.contacts() for own, table in model_tables(ids, k, rng).items()}


def simulate(root: int, tables: dict[int, list[Contact]]) -> tuple[dict[int, int], int, int]:
    """Run a broadcast on the model; (times each node got it, messages, largest fanout)."""
    got = dict.fromkeys(tables, 0)
    got[root] = 1
    messages = 0
    fanout = 0
    queue: deque[tuple[int, Block]] = deque([(root, Block.whole())])
    while queue:
        own, block = queue.popleft()
        assignments = plan(own, block, tables[own])
        fanout = max(fanout, len(assignments))
        blocks = [a.block for a in assignments]
        for i, x in enumerate(blocks):  # disjoint
            for y in blocks[i + 1 :]:
                assert x.low + x.size <= y.low or y.low + y.size <= x.low
        for a in assignments:
            assert a.contact.id in a.block and a.contact.id in block
            messages += 1
            got[a.contact.id] += 1
            queue.append((a.contact.id, a.block))
    return got, messages, fanout


@pytest.mark.parametrize(("n", "k", "seed"), [(300, 8, 1), (300, 20, 2), (600, 8, 3), (50, 3, 4)])
def test_full_coverage_with_n_minus_1_messages(n: int, k: int, seed: int) -> None:
    rng = random.Random(seed)
    ids = [rng.getrandbits(ID_BITS) for _ in range(n)]
    tables = build_tables(ids, k, rng)
    got, messages, fanout = simulate(ids[0], tables)
    assert set(got.values()) == {1}
    assert messages == n - 1
    assert fanout <= 7 * (n.bit_length() // 3 + 2)


def test_without_the_fallback_some_regions_look_empty() -> None:
    # The DESIGN.md fact behind the fallback: with k = 8 a node often knows nobody in a region
    # of the far half (a bucket spans four regions there), although nodes live in it.
    rng = random.Random(5)
    ids = [rng.getrandbits(ID_BITS) for _ in range(400)]
    tables = build_tables(ids, 8, rng)
    blind = 0
    for own, contacts in tables.items():
        for region in range(8):
            r = Block(region << 157, 3)
            populated = any(i in r for i in ids if i != own)
            known = any(c.id in r for c in contacts)
            blind += populated and not known
    assert blind > 0


@settings(max_examples=30, deadline=None)
@given(
    st.integers(min_value=2, max_value=120), st.integers(min_value=1, max_value=10), st.randoms()
)
def test_coverage_property(n: int, k: int, rng: random.Random) -> None:
    ids = list({rng.getrandbits(ID_BITS) for _ in range(n)})
    tables = build_tables(ids, k, rng)
    got, messages, _ = simulate(ids[0], tables)
    assert set(got.values()) == {1}
    assert messages == len(ids) - 1
