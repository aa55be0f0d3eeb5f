"""The disk store: atomic insertion, pins on disk, reopening, last-link reports."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from glidein_ext.cache.store import (
    STALE_TEMP_SECONDS,
    CacheStore,
    check_lfn,
    scan_cache,
    temp_name,
    temp_owner_alive,
)
from glidein_ext.errors import CacheError, CacheFullError


def test_insert_lookup_and_lru_eviction_on_disk(tmp_path: Path) -> None:
    store = CacheStore(tmp_path / "c", 100, fsync=False)
    for name in ("a", "b", "c"):
        store.insert_bytes(f"/store/{name}", b"x" * 40 if name != "c" else b"y" * 20)
    assert store.lookup("/store/a") == tmp_path / "c" / "data" / "store" / "a"
    store.insert_bytes("/store/d", b"z" * 30)  # full: b is now the LRU file
    assert not (tmp_path / "c" / "data" / "store" / "b").exists()
    assert store.lookup("/store/b") is None
    assert sorted(e.lfn for e in store.entries()) == ["/store/a", "/store/c", "/store/d"]
    assert store.used == 90


def test_failed_write_leaves_no_file_and_no_reservation(tmp_path: Path) -> None:
    store = CacheStore(tmp_path, 100, fsync=False)
    with pytest.raises(RuntimeError), store.writer("/store/f", 10) as out:
        out.write(b"12345")
        raise RuntimeError("network dropped")
    assert store.lookup("/store/f") is None
    assert store.used == 0
    assert os.listdir(tmp_path / "tmp") == []
    with (
        pytest.raises(CacheError, match="wrote 5 bytes, expected 10"),
        store.writer("/store/g", 10) as out,
    ):
        out.write(b"12345")
    assert "/store/g" not in store


def test_file_being_written_is_invisible(tmp_path: Path) -> None:
    store = CacheStore(tmp_path, 100, fsync=False)
    with store.writer("/store/w", 3) as out:
        out.write(b"abc")
        assert store.lookup("/store/w") is None
        assert store.peek("/store/w") is None
    assert store.lookup("/store/w") is not None


def test_oversize_file_is_refused_before_writing(tmp_path: Path) -> None:
    store = CacheStore(tmp_path, 10, fsync=False)
    src = tmp_path / "big"
    src.write_bytes(b"x" * 11)
    with pytest.raises(CacheFullError, match="larger than the whole cache"):
        store.insert_file("/store/big", src)
    assert os.listdir(tmp_path / "data") == []


def test_pinned_file_survives_eviction_pressure_and_pin_is_on_disk(tmp_path: Path) -> None:
    store = CacheStore(tmp_path, 100, fsync=False)
    store.insert_bytes("/store/job/input", b"i" * 60)
    with store.pinned("/store/job/input") as path:
        assert len(os.listdir(tmp_path / "pins")) == 1
        with pytest.raises(CacheFullError):
            store.insert_bytes("/store/other", b"o" * 50)
        with pytest.raises(CacheError, match="in use"):
            store.evict("/store/job/input")
        other = CacheStore(tmp_path, 100, fsync=False)  # e.g. `glidein-ext cache evict`
        assert [e.lfn for e in other.entries() if e.pinned] == ["/store/job/input"]
        with pytest.raises(CacheError, match="in use"):
            other.evict("/store/job/input")
        assert path.read_bytes() == b"i" * 60
    assert os.listdir(tmp_path / "pins") == []
    store.insert_bytes("/store/other", b"o" * 50)
    assert "/store/job/input" not in store


def test_reopening_keeps_lru_order_and_shrinks_to_capacity(tmp_path: Path) -> None:
    store = CacheStore(tmp_path, 1000, fsync=False)
    for i, name in enumerate(("a", "b", "c")):
        path = store.insert_bytes(f"/store/{name}", b"x" * 100)
        os.utime(path, (1000 + i, 1000 + i))
    os.utime(store.path_of("/store/a"), (2000, 2000))  # a used last
    reopened = CacheStore(tmp_path, 200, fsync=False)
    assert [e.lfn for e in reopened.entries()] == ["/store/c", "/store/a"]
    assert not store.path_of("/store/b").exists()
    assert [e.lfn for e in scan_cache(tmp_path)] == ["/store/c", "/store/a"]


def test_removing_the_last_link_is_reported(tmp_path: Path) -> None:
    reported: list[str] = []
    store = CacheStore(tmp_path / "c", 100, on_last_link=reported.append, fsync=False)
    store.insert_bytes("/store/one", b"1")
    store.insert_bytes("/store/two", b"2")
    extra = tmp_path / "elsewhere"
    os.link(store.path_of("/store/two"), extra)
    assert store.evict("/store/one")
    assert store.evict("/store/two")
    assert reported == ["/store/one"]  # two still has a link elsewhere
    assert extra.read_bytes() == b"2"
    assert not store.evict("/store/one")


@pytest.mark.parametrize("bad", ["store/x", "/store/../etc/passwd", "/store//x", "/store/./x", "/"])
def test_bad_lfns_are_refused(bad: str) -> None:
    with pytest.raises(CacheError, match="not a valid LFN"):
        check_lfn(bad)


def test_empty_directories_are_pruned_after_eviction(tmp_path: Path) -> None:
    store = CacheStore(tmp_path, 100, fsync=False)
    store.insert_bytes("/store/deep/dir/f", b"x")
    store.evict("/store/deep/dir/f")
    assert os.listdir(tmp_path / "data") == []


def test_opening_keeps_live_temporaries_and_removes_dead_and_stale_ones(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    mine = temp_name("part")  # this process: alive
    dead = f"{2**22 + 7}-0-{'0' * 32}.part"  # above pid_max's default range: no such process
    recycled = f"{os.getpid()}-1-{'1' * 32}.part"  # our pid, but another start time
    old_foreign, new_foreign = "legacy-old.part", "legacy-new.part"
    for name in (mine, dead, recycled, old_foreign, new_foreign):
        (tmp / name).write_bytes(b"x")
    day_and_more = time.time() - STALE_TEMP_SECONDS - 60
    os.utime(tmp / old_foreign, (day_and_more, day_and_more))
    CacheStore(tmp_path, 100, fsync=False)
    assert sorted(os.listdir(tmp)) == sorted([mine, new_foreign])


def test_temporaries_are_named_after_their_writer(tmp_path: Path) -> None:
    store = CacheStore(tmp_path, 100, fsync=False)
    with store.writer("/store/w", 1) as out:
        (name,) = os.listdir(tmp_path / "tmp")
        assert name.startswith(f"{os.getpid()}-") and name.endswith(".part")
        assert temp_owner_alive(name) is True
        out.write(b"w")
    assert temp_owner_alive("not-ours.part") is None
    for foreign in (f"{os.getpid()}-{'9' * 40}-x.part", "1-\u00b2-x.part", "-1-x.part"):
        assert temp_owner_alive(foreign) is None  # absurd ticks, a superscript digit, no pid


@pytest.mark.parametrize("how", ["symlink", "parent-symlink", "fifo"])
def test_removal_never_reaches_outside_the_cache(tmp_path: Path, how: str) -> None:
    """A name swapped for a link (or a FIFO) after caching: evicting it removes the link only."""
    reported: list[str] = []
    store = CacheStore(tmp_path / "c", 100, on_last_link=reported.append, fsync=False)
    victim = store.insert_bytes("/store/dir/victim", b"v")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(b"precious")
    victim.unlink()
    if how == "symlink":
        victim.symlink_to(outside / "victim")
    elif how == "parent-symlink":
        victim.parent.rmdir()
        victim.parent.symlink_to(outside)
    else:
        os.mkfifo(victim)
    assert store.clear() == ["/store/dir/victim"]  # neither raises nor blocks
    assert (outside / "victim").read_bytes() == b"precious"
    assert reported == []
    assert os.path.lexists(victim) == (how == "parent-symlink")  # there: the outside file


@pytest.mark.parametrize(
    "pin_text",
    [f"{10**30} /store/p\n", f"{2**31} /store/p\n", "-1 /store/p\n", "x /store/p", "\xff\xfe"],
)
def test_a_hostile_pin_file_neither_pins_nor_breaks_opening(tmp_path: Path, pin_text: str) -> None:
    CacheStore(tmp_path, 100, fsync=False).insert_bytes("/store/p", b"p")
    (tmp_path / "pins" / "forged.pin").write_text(pin_text, encoding="latin-1")
    store = CacheStore(tmp_path, 100, fsync=False)  # before: OverflowError for a huge pid
    assert [e.pinned for e in store.entries()] == [False]
    assert store.evict("/store/p")
