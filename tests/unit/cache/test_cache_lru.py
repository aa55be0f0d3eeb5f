"""The pure LRU core (Hasham 2011, IV.B-IV.D): eviction order, pins, oversize, capacity formula."""

from __future__ import annotations

import pytest

from glidein_ext.cache.lru import LruIndex, cache_capacity
from glidein_ext.errors import CacheError, CacheFullError


def test_capacity_formula_single_and_per_host() -> None:
    assert cache_capacity(10_000, 2_000) == 8_000  # Max_Space - Min_Threshold (IV.C)
    assert cache_capacity(10_000, 2_000, num_pilots=3) == 28_000  # x num_pilots (IV.D)
    with pytest.raises(CacheError, match="no cache space"):
        cache_capacity(1_000, 1_000)


def test_evicts_least_recently_used_until_the_new_file_fits() -> None:
    lru = LruIndex(100)
    for key in ("a", "b", "c", "d"):
        assert lru.admit(key, 25) == []
    assert lru.touch("a")  # a becomes most recent: b is now the oldest
    assert lru.admit("e", 40) == ["b", "c"]  # 2 x 25 >= 40 - 0 free
    assert [k for k, _ in lru.lru_order()] == ["d", "a", "e"]
    assert lru.used == 90
    assert not lru.touch("b")


def test_exactly_enough_is_evicted_and_no_more() -> None:
    lru = LruIndex(100)
    lru.admit("a", 60)
    lru.admit("b", 30)
    assert lru.admit("c", 10) == []  # fits in the free 10 bytes
    assert lru.admit("d", 5) == ["a"]


def test_pinned_files_are_never_evicted() -> None:
    lru = LruIndex(100)
    lru.admit("a", 50)
    lru.admit("b", 30)
    lru.pin("a")
    assert lru.admit("c", 40) == ["b"]
    assert "a" in lru
    with pytest.raises(CacheFullError, match="pinned files hold 50"):
        lru.admit("d", 60)
    assert "c" in lru  # a failed admission changes nothing
    lru.unpin("a")
    assert lru.admit("d", 60) == ["a"]


def test_pins_are_counted() -> None:
    lru = LruIndex(10)
    lru.admit("a", 10)
    lru.pin("a")
    lru.pin("a")
    lru.unpin("a")
    assert lru.is_pinned("a")
    lru.unpin("a")
    assert not lru.is_pinned("a")
    with pytest.raises(CacheError):
        lru.unpin("a")


def test_file_larger_than_the_cache_is_a_clear_error() -> None:
    lru = LruIndex(100)
    lru.admit("a", 10)
    with pytest.raises(CacheFullError, match="larger than the whole cache"):
        lru.admit("big", 101)
    assert lru.used == 10


def test_readmitting_a_key_replaces_its_size() -> None:
    lru = LruIndex(100)
    lru.admit("a", 40)
    lru.admit("b", 40)
    assert lru.admit("a", 60) == []  # 40 - 40 + 60 fits exactly
    assert lru.admit("a", 70) == ["b"]
    assert lru.used == 70


def test_shrinking_capacity_evicts_lru_first_but_keeps_pins() -> None:
    lru = LruIndex(300)
    for key in ("a", "b", "c"):
        lru.admit(key, 100)
    lru.pin("a")
    assert lru.set_capacity(150) == ["b", "c"]
    assert lru.used == 100 and lru.capacity == 150
