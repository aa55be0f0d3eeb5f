"""Storage: append with deduplication, owners, expiry and republishing (Delgado Peris 2014
§III.A)."""

from __future__ import annotations

from glidein_ext.dht.storage import Storage

KEY = 7


def test_append_keeps_every_replica_once() -> None:
    store = Storage()
    assert store.append(KEY, b"host1:/f", owner=1, ttl=10, now=0)
    assert store.append(KEY, b"host2:/f", owner=2, ttl=10, now=0)
    assert not store.append(KEY, b"host1:/f", owner=1, ttl=10, now=1)
    assert sorted(v.data for v in store.get(KEY, now=2)) == [b"host1:/f", b"host2:/f"]


def test_duplicate_keeps_later_expiry_and_newer_owner() -> None:
    store = Storage()
    store.append(KEY, b"v", owner=1, ttl=10, now=0)
    store.append(KEY, b"v", owner=2, ttl=5, now=1)
    (value,) = store.get(KEY, now=2)
    assert value.owner == 2
    assert value.expires_at == 10
    assert value.ttl(now=4) == 6


def test_values_expire() -> None:
    store = Storage()
    store.append(KEY, b"short", owner=1, ttl=5, now=0)
    store.append(KEY, b"long", owner=1, ttl=50, now=0)
    assert [v.data for v in store.get(KEY, now=6)] == [b"long"]
    assert store.expire(now=6) == 1
    assert store.expire(now=60) == 1
    assert KEY not in store
    assert store.get(KEY, now=60) == []


def test_non_positive_ttl_is_refused() -> None:
    store = Storage()
    assert not store.append(KEY, b"v", owner=1, ttl=0, now=0)
    assert store.get(KEY, now=0) == []


def test_cap_drops_the_value_expiring_first() -> None:
    store = Storage(max_values_per_key=2)
    store.append(KEY, b"a", owner=1, ttl=30, now=0)
    store.append(KEY, b"b", owner=1, ttl=10, now=0)
    assert store.append(KEY, b"c", owner=1, ttl=20, now=0)
    assert sorted(v.data for v in store.get(KEY, now=0)) == [b"a", b"c"]
    assert not store.append(KEY, b"d", owner=1, ttl=1, now=0)  # it would be the first to go
    assert sorted(v.data for v in store.get(KEY, now=0)) == [b"a", b"c"]


def test_a_republished_value_lives_longer() -> None:
    store = Storage()
    store.append(KEY, b"mine", owner=1, ttl=10, now=0)
    store.append(KEY, b"mine", owner=1, ttl=10, now=5)  # the owner republished it
    assert [v.expires_at for v in store.get(KEY, now=12)] == [15]


def test_republish_skips_keys_stored_recently() -> None:
    store = Storage()
    store.append(1, b"v", owner=1, ttl=100, now=0)
    store.append(2, b"v", owner=1, ttl=100, now=0)
    store.append(2, b"w", owner=1, ttl=100, now=8)  # someone stored key 2 again
    assert store.due_for_republish(now=10, interval=5) == [1]
    store.mark_republished(1, now=10)
    assert store.due_for_republish(now=12, interval=5) == []
    assert sorted(store.keys()) == [1, 2]
    assert len(store) == 2


def test_remove_drops_only_the_owners_value() -> None:
    store = Storage()
    store.append(KEY, b"wn1:/f", owner=1, ttl=10, now=0)
    store.append(KEY, b"wn2:/f", owner=2, ttl=10, now=0)
    assert not store.remove(KEY, b"wn1:/f", owner=2)  # not its value
    assert not store.remove(KEY, b"wn9:/f", owner=1)  # not there
    assert store.remove(KEY, b"wn1:/f", owner=1)
    assert [v.data for v in store.get(KEY, now=1)] == [b"wn2:/f"]
    assert store.remove(KEY, b"wn2:/f", owner=2)
    assert KEY not in store
    assert not store.remove(KEY, b"wn2:/f", owner=2)
