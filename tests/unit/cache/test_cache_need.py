"""CACHED_INPUT_NEEDED_MB from a pilot's cache and the tasks still to run (``cache.need``), with
worked examples."""

from __future__ import annotations

from glidein_ext.cache.need import (
    NeededFiles,
    needed_bytes,
    needed_files,
    needed_mb,
    needed_mb_of_inputs,
    to_mb,
    union_mb,
)

MB = 1_000_000


def test_only_cached_files_a_pending_task_reads_count_once_each() -> None:
    cached = {"/a": 700 * MB, "/b": 300 * MB, "/c": 50 * MB}
    pending = [("/a", "/x"), ("/a",), ("/y",)]  # /a read twice, /b and /c by nobody
    assert needed_bytes(cached, pending) == 700 * MB
    assert needed_mb(cached, pending) == 700
    assert needed_mb(cached, [("/b",), ("/c", "/a")]) == 1050


def test_nothing_pending_or_nothing_cached_is_zero() -> None:
    assert needed_mb({"/a": 5 * MB}, []) == 0
    assert needed_mb({}, [("/a",)]) == 0


def test_megabytes_round_up() -> None:
    assert to_mb(1) == 1 and to_mb(MB) == 1 and to_mb(MB + 1) == 2 and to_mb(0) == 0
    assert needed_mb({"/a": 1}, [("/a",)]) == 1


def test_from_a_tasklists_inputs() -> None:
    inputs = [("/a", 700 * MB), ("/b", 300 * MB), ("/a", 700 * MB), ("/z", 9 * MB)]
    assert needed_mb_of_inputs({"/a", "/c"}, inputs) == 700
    assert needed_mb_of_inputs(set(), inputs) == 0


def test_needed_files_and_their_union_count_each_file_once() -> None:
    inputs = [("/a", 700 * MB), ("/b", 300 * MB), ("/a", 700 * MB), ("/z", -1)]
    lane0 = needed_files({"/a", "/z"}, inputs)
    lane1 = needed_files({"/a", "/b"}, inputs)
    assert lane0 == {"/a": 700 * MB, "/z": 0} and lane1 == {"/a": 700 * MB, "/b": 300 * MB}
    assert union_mb([lane0, lane1]) == 1000  # /a, held by both lanes (hard links), once
    assert union_mb([]) == 0


def test_a_pilots_word_is_kept_with_its_time_and_worked_out_at_most_every_period() -> None:
    word = NeededFiles(every=10.0)
    assert word.latest() is None
    assert word.due(100.0) and not word.due(105.0) and word.due(110.0)
    files = {"/a": 5}
    word.learn(files, 1234.0)
    files["/b"] = 7  # the holder keeps its own copy
    assert word.latest() == ({"/a": 5}, 1234.0)
