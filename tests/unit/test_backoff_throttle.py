"""The pure backoff and throttle cores (Lee 2003 4.3), driven with a fake clock."""

from __future__ import annotations

import random

import pytest

from glidein_ext.backoff import Backoff
from glidein_ext.throttle import Throttle


def test_backoff_doubles_with_jitter_up_to_the_cap() -> None:
    backoff = Backoff(base=1.0, cap=8.0, jitter=0.5, rng=random.Random(7))
    delays = [backoff.failed("a", now=0.0) for _ in range(6)]
    for n, delay in enumerate(delays):
        full = min(8.0, 2.0**n)
        assert full * 0.5 <= delay <= full
    assert backoff.failures("a") == 6
    assert not backoff.ready("a", now=delays[-1] - 0.01)
    assert backoff.ready("a", now=delays[-1])
    assert backoff.ready("b", now=0.0)  # another key is untouched


def test_backoff_jitter_spreads_clients_that_failed_together() -> None:
    delays = {
        round(Backoff(base=1.0, rng=random.Random(seed)).failed("a", 0.0), 6) for seed in range(20)
    }
    assert len(delays) > 10


def test_backoff_success_forgets_the_failures() -> None:
    backoff = Backoff(base=1.0, jitter=0.0)
    backoff.failed("a", 0.0)
    backoff.failed("a", 0.0)
    backoff.succeeded("a")
    assert backoff.ready("a", 0.0) and backoff.failures("a") == 0
    assert backoff.failed("a", 10.0) == 1.0


def test_backoff_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        Backoff(base=0)
    with pytest.raises(ValueError):
        Backoff(base=2, cap=1)


def test_throttle_halves_on_failure_and_recovers_additively() -> None:
    throttle = Throttle(max_rate=8.0, min_rate=0.5, burst=2, decrease=0.5, increase=1.0)
    assert throttle.delay(0.0) == 0.0
    throttle.failed(0.0)
    assert throttle.rate == 4.0 and throttle.throttled
    assert throttle.delay(0.0) == pytest.approx(0.25)  # the bucket is empty: 1 / rate
    for _ in range(5):
        throttle.failed(0.0)
    assert throttle.rate == 0.5  # never below min_rate
    assert throttle.delay(0.0) == pytest.approx(2.0)
    throttle.succeeded()
    assert throttle.rate == 1.5  # gradual: +increase per success
    for _ in range(20):
        throttle.succeeded()
    assert throttle.rate == 8.0 and not throttle.throttled


def test_throttle_bucket_allows_a_burst_then_the_rate() -> None:
    throttle = Throttle(max_rate=2.0, min_rate=0.1, burst=3)
    assert throttle.allowance(0.0) == 3
    throttle.take(0.0, 3)
    assert throttle.allowance(0.0) == 0
    assert throttle.delay(0.0) == pytest.approx(0.5)
    assert throttle.allowance(1.0) == 2  # refilled at 2/s
    assert throttle.allowance(100.0) == 3  # never above burst


def test_a_healthy_unlimited_throttle_never_waits_until_a_failure() -> None:
    throttle = Throttle(max_rate=10.0, burst=1, limit_healthy=False)
    for _ in range(100):
        assert throttle.delay(0.0) == 0.0
        throttle.take(0.0)
    throttle.failed(0.0)
    assert throttle.delay(0.0) == pytest.approx(0.2)  # 1 / (10 * 0.5)
    for _ in range(5):
        throttle.succeeded()
    assert not throttle.throttled and throttle.delay(0.0) == 0.0


def test_throttle_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        Throttle(max_rate=1.0, min_rate=2.0)
    with pytest.raises(ValueError):
        Throttle(decrease=1.0)
