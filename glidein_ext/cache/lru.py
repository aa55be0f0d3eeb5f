"""The pure LRU core of a pilot's data cache (Hasham 2011, IV.B and IV.C).

The cache holds files keyed by name (an LFN) with their sizes.  Its capacity is
``Cache_Size = Max_Space - Min_Threshold`` (IV.C), or ``Max_Space * num_pilots - Min_Threshold``
with cache-per-host sharing (IV.D, see :mod:`glidein_ext.cache.hostshare`).  To admit a file of
``RequiredSize`` bytes, least-recently-used files are chosen for eviction until the evicted sizes
free enough room (IV.C: ``sum S_i >= RequiredSize`` beyond the free space).  Files in use by a
running job are pinned and never chosen.

No I/O here: :class:`LruIndex` only decides; :mod:`glidein_ext.cache.store` does the unlinking.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

from glidein_ext.errors import CacheError, CacheFullError


def cache_capacity(max_space: int, min_threshold: int, num_pilots: int = 1) -> int:
    """``Max_Space * num_pilots - Min_Threshold`` in bytes (Hasham 2011, IV.C and IV.D).

    Raises CacheError when the settings leave no room at all.
    """
    if max_space <= 0 or min_threshold < 0 or num_pilots < 1:
        raise CacheError(
            f"bad cache settings: max_space={max_space}, min_threshold={min_threshold}, "
            f"num_pilots={num_pilots}"
        )
    capacity = max_space * num_pilots - min_threshold
    if capacity <= 0:
        raise CacheError(
            f"no cache space: Max_Space x {num_pilots} ({max_space * num_pilots} bytes) is not "
            f"above Min_Threshold ({min_threshold} bytes)"
        )
    return capacity


class LruIndex:
    """Sizes and recency of cached files, pins, and the eviction decision.

    Recency order: the first key of the internal OrderedDict is the least recently used.
    A key may be pinned several times (one pin per running job that reads it).
    """

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise CacheError(f"cache capacity must be positive, got {capacity}")
        self._capacity = capacity
        self._sizes: OrderedDict[str, int] = OrderedDict()
        self._pins: dict[str, int] = {}
        self._used = 0
        self._pinned_bytes = 0

    # -- queries -------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def used(self) -> int:
        return self._used

    @property
    def free(self) -> int:
        return self._capacity - self._used

    def __len__(self) -> int:
        return len(self._sizes)

    def __contains__(self, key: object) -> bool:
        return key in self._sizes

    def size_of(self, key: str) -> int | None:
        return self._sizes.get(key)

    def is_pinned(self, key: str) -> bool:
        return key in self._pins

    def lru_order(self) -> Iterator[tuple[str, int]]:
        """(key, size) from least to most recently used."""
        return iter(list(self._sizes.items()))

    # -- recency -------------------------------------------------------------------------------

    def touch(self, key: str) -> bool:
        """Mark ``key`` most recently used; False if it is not cached (a miss)."""
        if key not in self._sizes:
            return False
        self._sizes.move_to_end(key)
        return True

    # -- pins (IV.C: files of a running job stay) ----------------------------------------------

    def pin(self, key: str) -> None:
        size = self._sizes.get(key)
        if size is None:
            raise CacheError(f"cannot pin {key}: not in the cache")
        count = self._pins.get(key, 0)
        if count == 0:
            self._pinned_bytes += size
        self._pins[key] = count + 1

    def unpin(self, key: str) -> None:
        count = self._pins.get(key, 0)
        if count == 0:
            raise CacheError(f"cannot unpin {key}: not pinned")
        if count == 1:
            del self._pins[key]
            self._pinned_bytes -= self._sizes.get(key, 0)
        else:
            self._pins[key] = count - 1

    # -- admission and eviction (IV.C) ---------------------------------------------------------

    def plan_admit(self, key: str, size: int) -> list[str]:
        """The keys to evict, least recently used first, so that ``key`` of ``size`` fits.

        Does not change anything.  Raises CacheFullError when ``size`` exceeds the capacity or
        when the pinned files leave too little room.
        """
        if size < 0:
            raise CacheError(f"negative size {size} for {key}")
        if size > self._capacity:
            raise CacheFullError(
                f"{key} is {size} bytes, larger than the whole cache ({self._capacity} bytes)"
            )
        current = self._sizes.get(key, 0)
        if key in self._pins and size != current:
            raise CacheError(f"cannot replace {key}: it is pinned by a running job")
        need = self._used - current + size - self._capacity
        victims: list[str] = []
        if need <= 0:
            return victims
        for other, other_size in self._sizes.items():
            if other == key or other in self._pins:
                continue
            victims.append(other)
            need -= other_size
            if need <= 0:
                return victims
        raise CacheFullError(
            f"{key} ({size} bytes) does not fit: pinned files hold {self._pinned_bytes} of "
            f"{self._capacity} bytes"
        )

    def admit(self, key: str, size: int) -> list[str]:
        """Evict what :meth:`plan_admit` chooses, add ``key`` as most recent; return the evicted."""
        victims = self.plan_admit(key, size)
        for victim in victims:
            self.remove(victim)
        old = self._sizes.pop(key, None)
        if old is not None:
            self._used -= old
        self._sizes[key] = size
        self._used += size
        return victims

    def add_over_capacity(self, key: str, size: int) -> None:
        """Add ``key`` as most recent without evicting (reloading a cache from disk); call
        :meth:`shrink_to_fit` afterwards."""
        old = self._sizes.pop(key, None)
        if old is not None:
            self._used -= old
        self._sizes[key] = size
        self._used += size

    def remove(self, key: str) -> bool:
        """Forget ``key`` (pinned or not: the caller decided); False if it was not cached."""
        size = self._sizes.pop(key, None)
        if size is None:
            return False
        self._used -= size
        if self._pins.pop(key, 0):
            self._pinned_bytes -= size
        return True

    def set_capacity(self, capacity: int) -> list[str]:
        """Change the capacity (IV.D: it follows the number of pilots on the host).

        Returns the keys evicted, least recently used first, to fit the new capacity; pinned
        files stay even when that leaves the cache over capacity until they are unpinned.
        """
        if capacity <= 0:
            raise CacheError(f"cache capacity must be positive, got {capacity}")
        self._capacity = capacity
        return self.shrink_to_fit()

    def shrink_to_fit(self) -> list[str]:
        """Evict unpinned files, least recently used first, until usage is within capacity."""
        victims: list[str] = []
        over = self._used - self._capacity
        for key, size in list(self._sizes.items()):
            if over <= 0:
                break
            if key in self._pins:
                continue
            victims.append(key)
            over -= size
        for victim in victims:
            self.remove(victim)
        return victims
