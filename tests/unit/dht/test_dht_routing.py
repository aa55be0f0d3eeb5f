"""The routing table: k-buckets, least-recently-seen eviction, LEAVE and stale contacts."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from glidein_ext.dht.contact import Contact
from glidein_ext.dht.ids import ID_BITS, ID_SPACE, bucket_index
from glidein_ext.dht.routing import RoutingTable

OWN = 0


def far(i: int) -> Contact:
    """A contact in bucket 159 (the far half of the space)."""
    return Contact((1 << 159) | i, "10.0.0.1", 1000 + i)


def test_observe_adds_and_orders_by_recency() -> None:
    table = RoutingTable(OWN, k=3)
    for i in range(3):
        assert table.observe(far(i)) is None
    table.observe(far(0))
    assert [c.id for c in table.contacts()] == [far(0).id, far(2).id, far(1).id]
    assert len(table) == 3
    assert far(1).id in table


def test_full_bucket_evicts_least_recently_seen() -> None:
    # Delgado Peris 2014 §III.A: least-recently-seen expiration, not Kademlia's keep-the-oldest.
    table = RoutingTable(OWN, k=3)
    for i in range(3):
        table.observe(far(i))
    table.observe(far(0))  # far(1) is now the least recently seen
    evicted = table.observe(far(3))
    assert evicted == far(1)
    assert far(1).id not in table
    assert far(3).id in table
    assert len(table) == 3


def test_removed_contact_is_replaced_from_the_evicted() -> None:
    table = RoutingTable(OWN, k=2)
    table.observe(far(0))
    table.observe(far(1))
    table.observe(far(2))  # evicts far(0) into the replacement cache
    assert far(0).id not in table
    assert table.remove(far(2).id)
    assert far(0).id in table
    assert not table.remove(far(2).id)


def test_leave_drops_at_once() -> None:
    table = RoutingTable(OWN, k=20)
    table.observe(far(5))
    assert table.remove(far(5).id)
    assert table.get(far(5).id) is None
    assert table.closest(far(5).id, 5) == []


def test_stale_after_consecutive_failures() -> None:
    table = RoutingTable(OWN, k=20, stale_after=3)
    table.observe(far(1))
    assert not table.record_failure(far(1).id)
    assert not table.record_failure(far(1).id)
    table.observe(far(1))  # heard from again: the count restarts
    assert not table.record_failure(far(1).id)
    assert not table.record_failure(far(1).id)
    assert table.record_failure(far(1).id)
    assert far(1).id not in table
    assert not table.record_failure(far(1).id)


def test_a_missed_answer_makes_a_contact_suspect_and_least_recently_seen() -> None:
    # a contact that did not answer is avoided at once, and evicted first.
    table = RoutingTable(OWN, k=3)
    for i in range(3):
        table.observe(far(i))
    assert not table.record_failure(far(2).id)  # the most recently seen one
    assert table.is_suspect(far(2).id) and table.failures(far(2).id) == 1
    assert not table.is_suspect(far(1).id)
    # Live contacts first, wherever the suspect lies; suspects only fill up.
    assert [c.id for c in table.closest(far(2).id, 2)] == [far(0).id, far(1).id]
    assert table.closest(far(2).id, 3)[-1] == far(2)
    assert table.contacts()[-1] == far(2)
    # Delgado Peris 2014 §III.A: the least recently seen is evicted for a newcomer, and that is
    # now the suspect.
    assert table.observe(far(3)) == far(2)
    assert far(2).id not in table


def test_dead_contacts_are_remembered_until_heard_from() -> None:
    table = RoutingTable(OWN, k=20, stale_after=2, memory=3)
    for i in range(5):
        table.observe(far(i))
    assert not table.record_failure(far(1).id)
    assert table.record_failure(far(1).id)
    assert far(1).id not in table and table.is_suspect(far(1).id)
    # Contacts we were told about but never had count too, and so does LEAVE.
    stranger = Contact(1 << 150, "10.0.0.2", 7)
    assert not table.record_failure(stranger.id)
    assert table.is_suspect(stranger.id)
    table.mark_dead(far(2).id)
    assert far(2).id not in table and table.is_suspect(far(2).id)
    table.observe(far(1))  # it answered after all
    assert far(1).id in table and not table.is_suspect(far(1).id)
    for i in range(10, 14):  # the memory is bounded: the oldest are forgotten
        table.mark_dead(far(i).id)
    assert not table.is_suspect(far(2).id) and table.is_suspect(far(13).id)


def test_promoted_replacements_are_suspect_until_heard_from() -> None:
    table = RoutingTable(OWN, k=2)
    for i in range(3):
        table.observe(far(i))  # far(0) waits in the replacement cache
    mark = table.mark()
    table.mark_dead(far(2).id)
    assert far(0).id in table and table.is_suspect(far(0).id)
    assert table.take_promoted() == [far(0)] and table.take_promoted() == []
    assert table.unheard_since(mark) == [far(1), far(0)]  # live first
    table.observe(far(0))
    assert not table.is_suspect(far(0).id)
    assert table.unheard_since(mark) == [far(1)]


def test_own_id_is_never_stored() -> None:
    table = RoutingTable(42, k=20)
    assert table.observe(Contact(42, "h", 1)) is None
    assert len(table) == 0


def test_address_change_is_recorded() -> None:
    table = RoutingTable(OWN, k=20)
    table.observe(far(1))
    moved = Contact(far(1).id, "10.0.0.9", 9)
    table.observe(moved)
    assert table.get(far(1).id) == moved
    assert len(table) == 1


@settings(max_examples=50)
@given(
    st.integers(min_value=0, max_value=ID_SPACE - 1),
    st.lists(st.integers(min_value=0, max_value=ID_SPACE - 1), max_size=200, unique=True),
    st.integers(min_value=0, max_value=ID_SPACE - 1),
    st.integers(min_value=1, max_value=30),
)
def test_closest_matches_brute_force(own: int, others: list[int], target: int, count: int) -> None:
    table = RoutingTable(own, k=8)
    for ident in others:
        table.observe(Contact(ident, "h", 1))
    held = {c.id for c in table.contacts()}
    expected = sorted(held, key=lambda i: i ^ target)[:count]
    assert [c.id for c in table.closest(target, count)] == expected
    # Each bucket keeps at most k contacts, and every stored contact is in its right bucket.
    assert all(size <= 8 for size in table.bucket_sizes().values())
    for index, size in table.bucket_sizes().items():
        assert size == sum(1 for i in held if bucket_index(own, i) == index)


@settings(max_examples=80)
@given(
    st.integers(min_value=0, max_value=ID_SPACE - 1),
    st.lists(
        st.tuples(st.integers(min_value=1, max_value=ID_BITS), st.integers(min_value=0)),
        max_size=120,
    ),
    st.integers(min_value=0, max_value=ID_BITS),
    st.integers(min_value=1, max_value=30),
    st.data(),
)
def test_closest_reads_buckets_in_distance_order_with_suspects_last(
    own: int,
    offsets: list[tuple[int, int]],
    target_bits: int,
    count: int,
    data: st.DataObject,
) -> None:
    # Ids at every distance from ours (not only the far buckets random ids fall in), a target
    # anywhere from our own id outwards, some contacts suspect, some excluded.
    others = {own ^ (1 << (bits - 1) | low % (1 << (bits - 1))) for bits, low in offsets}
    table = RoutingTable(own, k=4)
    for ident in sorted(others):
        table.observe(Contact(ident, "h", 1))
    held = [c.id for c in table.contacts()]
    suspect = set(data.draw(st.lists(st.sampled_from(held), max_size=10))) if held else set()
    for ident in suspect:
        table.record_failure(ident)
    excluded = set(data.draw(st.lists(st.sampled_from(held), max_size=5))) if held else set()
    target = own ^ data.draw(st.integers(min_value=0, max_value=(1 << target_bits) - 1))
    candidates = [i for i in held if i not in excluded]
    expected = sorted(candidates, key=lambda i: (i in suspect, i ^ target))[:count]
    assert [c.id for c in table.closest(target, count, excluded)] == expected


def test_bucket_size_follows_removals() -> None:
    table = RoutingTable(OWN, k=20)
    for i in range(3):
        table.observe(far(i))
    assert table.bucket_size(159) == 3
    table.remove(far(0).id)
    table.mark_dead(far(1).id)
    assert table.bucket_size(159) == 1
    table.remove(far(2).id)
    assert table.bucket_size(159) == 0
    assert table.closest(far(0).id, 5) == []
    table.observe(far(4))
    assert table.closest(OWN, 5) == [far(4)]


def test_closest_honours_exclude() -> None:
    table = RoutingTable(OWN, k=20)
    for i in range(5):
        table.observe(far(i))
    assert far(0).id not in [c.id for c in table.closest(far(0).id, 5, exclude=[far(0).id])]


def test_buckets_to_refresh_start_at_the_closest_neighbour() -> None:
    table = RoutingTable(OWN, k=20)
    table.observe(Contact(1 << 150, "h", 1))
    assert table.buckets_to_refresh(now=100.0, interval=50.0) == list(range(150, ID_BITS))
    table.note_lookup((1 << 155) + 3, now=90.0)
    assert 155 not in table.buckets_to_refresh(now=100.0, interval=50.0)
    assert RoutingTable(OWN, k=20).buckets_to_refresh(now=100.0, interval=0.0) == []


def test_random_id_in_bucket() -> None:
    table = RoutingTable(12345, k=20)
    rng = random.Random(1)
    for index in (0, 1, 80, 159):
        for _ in range(20):
            assert bucket_index(12345, table.random_id_in_bucket(index, rng)) == index
