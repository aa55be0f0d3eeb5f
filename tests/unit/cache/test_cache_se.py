"""The experimental storage element: Table I conditions, failure rate, delay, containment."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from glidein_ext.cache.checksum import meta_of_file
from glidein_ext.cache.se import SE_CONDITIONS, StorageElement, condition
from glidein_ext.errors import ConfigError, TransferError


def test_table_one_conditions() -> None:
    assert condition("d1f1").delay_factor == 0.01 and condition("d1f1").failure_rate == 0
    assert condition("D2F2").delay_factor == 0.15 and condition("d2f2").failure_rate == 0.03
    assert condition("d3f3").delay_factor == 0.5 and condition("d3f3").failure_rate == 0.1
    assert set(SE_CONDITIONS) == {"d1f1", "d2f2", "d3f3"}
    with pytest.raises(ConfigError, match="unknown SE condition"):
        condition("d9f9")


def test_failure_rate_is_honoured(tmp_path: Path) -> None:
    se = StorageElement.with_condition(tmp_path, "d3f3", time_scale=0.0, seed=7)
    (tmp_path / "f").write_bytes(b"data")
    pfn = se.pfn_of("f")
    failures = 0
    trials = 4000
    for _ in range(trials):
        try:
            se.get(pfn, io.BytesIO())
        except TransferError:
            failures += 1
    # binomial(4000, 0.1): mean 400, sd 19; 6 sd either side
    assert 286 < failures < 514
    assert se.stats.failures == failures and se.stats.gets == trials - failures


def test_no_failures_at_rate_zero_and_all_at_rate_one(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    ok = StorageElement(tmp_path, failure_rate=0.0, seed=1)
    for _ in range(200):
        ok.get(ok.pfn_of("f"), io.BytesIO())
    bad = StorageElement(tmp_path, failure_rate=1.0, seed=1)
    with pytest.raises(TransferError, match="failed"):
        bad.get(bad.pfn_of("f"), io.BytesIO())


def test_delay_is_gaussian_around_the_delay_factor(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    slept: list[float] = []
    se = StorageElement(tmp_path, delay_factor=0.5, time_scale=2.0, seed=3, sleep=slept.append)
    for _ in range(500):
        se.get(se.pfn_of("f"), io.BytesIO())
    mean = sum(slept) / len(slept)
    assert 0.9 < mean < 1.1  # 0.5 x 2.0 x N(1, 0.25)
    assert min(slept) >= 0 and max(slept) > 1.2
    assert se.stats.delay_seconds == pytest.approx(sum(slept))


def test_same_seed_same_run(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")

    def outcomes() -> list[bool]:
        se = StorageElement(tmp_path, failure_rate=0.3, seed=42)
        result = []
        for _ in range(50):
            try:
                se.get(se.pfn_of("f"), io.BytesIO())
                result.append(True)
            except TransferError:
                result.append(False)
        return result

    assert outcomes() == outcomes()


def test_get_put_stat_are_real_file_io(tmp_path: Path) -> None:
    se = StorageElement(tmp_path / "se")
    src = tmp_path / "src"
    src.write_bytes(b"hello world")
    meta = se.put(src, se.pfn_of("/store/a/b"))
    assert (tmp_path / "se" / "store" / "a" / "b").read_bytes() == b"hello world"
    assert meta == meta_of_file(src)
    out = io.BytesIO()
    assert se.get(se.pfn_of("/store/a/b"), out) == meta
    assert out.getvalue() == b"hello world"


@pytest.mark.parametrize("pfn", ["relative/path", "/etc/passwd", "file:///x/../../etc/passwd"])
def test_pfns_outside_the_root_are_refused(tmp_path: Path, pfn: str) -> None:
    se = StorageElement(tmp_path)
    with pytest.raises(TransferError):
        se.get(pfn, io.BytesIO())


def test_bad_settings(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        StorageElement(tmp_path, failure_rate=1.5)
