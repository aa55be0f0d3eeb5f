"""The pilot agent's cache: sizes, stage-in order, pins, outputs, host links, TQ reports."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest

from glidein_ext.agent.pilot_cache import PilotCache
from glidein_ext.agent.runner import run_task
from glidein_ext.agent.settings import parse_size
from glidein_ext.errors import CacheError, ConfigError, TransferError
from glidein_ext.tq.client.protocol import Neighbour, TaskAssignment


def _se_file(se: Path, lfn: str, data: bytes) -> None:
    path = se / lfn.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_parse_size() -> None:
    assert parse_size("500M") == 500 * 1024**2
    assert parse_size("10G") == 10 * 1024**3
    assert parse_size("1.5GiB") == int(1.5 * 1024**3)
    assert parse_size("4096") == 4096
    assert parse_size("2k") == 2048
    for bad in ("", "ten", "5X", "-1G"):
        with pytest.raises(ConfigError):
            parse_size(bad)


def test_fetch_from_se_then_cache_then_host_by_hard_link(tmp_path: Path) -> None:
    se = tmp_path / "se"
    _se_file(se, "/d/x", b"x" * 100)
    first = PilotCache(tmp_path / "a", max_space=10_000, min_threshold=0, se_dir=se)
    path, origin = first.fetch("/d/x")
    assert origin == "se" and path.read_bytes() == b"x" * 100
    assert first.fetch("/d/x")[1] == "cache"
    (se / "d" / "x").unlink()  # the second pilot can only get it from the first one
    second = PilotCache(tmp_path / "b", max_space=10_000, min_threshold=0, se_dir=se)
    second.set_pilot_id(2)
    second.set_others([Neighbour(1, str(first.root))])
    linked, origin = second.fetch("/d/x")
    assert origin == "host"
    assert linked.stat().st_ino == path.stat().st_ino
    assert second.share.capacity() == 2 * 10_000
    with pytest.raises(TransferError):
        second.fetch("/d/none")


def test_no_se_and_no_cache_is_a_transfer_error(tmp_path: Path) -> None:
    cache = PilotCache(tmp_path / "c", max_space=1000, min_threshold=0)
    with pytest.raises(TransferError, match="no SE"):
        cache.fetch("/a")


def test_lru_eviction_spares_pinned_files_and_is_reported(tmp_path: Path) -> None:
    se = tmp_path / "se"
    for name in "abc":
        _se_file(se, f"/f/{name}", name.encode() * 400)
    cache = PilotCache(tmp_path / "c", max_space=1000, min_threshold=100, se_dir=se)
    cache.fetch("/f/a")
    cache.acquire("/f/b")  # pinned: a running task reads it
    cache.mark_reported(cache.lfns())
    assert cache.changes() is None
    cache.fetch("/f/c")  # 900 bytes allowed: the LRU unpinned file (a) goes
    assert cache.lfns() == ["/f/b", "/f/c"]
    assert cache.gone == ["/f/a"]  # its only link: deleted from the system
    assert cache.changes() == ["/f/b", "/f/c"]
    with pytest.raises(CacheError):
        cache.store.evict("/f/b")
    cache.store.unpin("/f/b")
    assert cache.store.evict("/f/b")


def test_run_task_pins_inputs_and_caches_outputs_of_successes_only(tmp_path: Path) -> None:
    se = tmp_path / "se"
    _se_file(se, "/in/x", b"payload")
    cache = PilotCache(tmp_path / "w" / "cache", max_space=10_000, min_threshold=0, se_dir=se)
    seen: list[bool] = []
    original_pin = cache.store.pin

    def pin(lfn: str) -> None:
        original_pin(lfn)
        seen.append(any(e.pinned for e in cache.store.entries() if e.lfn == lfn))

    cache.store.pin = pin  # type: ignore[method-assign]
    task = TaskAssignment(
        task_id=1,
        attempt=1,
        name="copy",
        command="sh -c 'cat $TQ_INPUTS > $TQ_OUTPUTS'",
        inputs=("/in/x",),
        outputs=("/out/y",),
        max_runtime=30,
        cached_inputs=0,
    )
    outcome = run_task(task, tmp_path / "w", cache, threading.Event())
    assert outcome.exit_code == 0 and outcome.outputs == ["/out/y"]
    assert "/in/x:se" in outcome.report
    assert seen == [True]
    assert not any(e.pinned for e in cache.store.entries())  # released after the task
    assert cache.store.path_of("/out/y").read_bytes() == b"payload"
    assert (se / "out" / "y").read_bytes() == b"payload"
    failing = dataclasses.replace(
        task, task_id=2, outputs=("/out/z",), command="sh -c 'echo > $TQ_OUTPUTS; exit 3'"
    )
    outcome = run_task(failing, tmp_path / "w", cache, threading.Event())
    assert outcome.exit_code == 3 and "/in/x:cache" in outcome.report
    assert "/out/z" not in cache.lfns() and not (se / "out" / "z").exists()


def test_run_task_stage_in_failure(tmp_path: Path) -> None:
    cache = PilotCache(tmp_path / "cache", max_space=1000, min_threshold=0, se_dir=tmp_path / "se")
    task = TaskAssignment(3, 1, "t", "true", ("/missing",), (), max_runtime=5, cached_inputs=0)
    outcome = run_task(task, tmp_path, cache, threading.Event())
    assert outcome.exit_code == 97 and "stage-in failed" in outcome.report
