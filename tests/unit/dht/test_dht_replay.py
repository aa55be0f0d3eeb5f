"""The replay window."""

from __future__ import annotations

from glidein_ext.dht.replay import ReplayGuard, Verdict


def test_fresh_then_replayed() -> None:
    guard = ReplayGuard(window=60)
    assert guard.check(1, b"n1", timestamp=100, now=100) is Verdict.FRESH
    assert guard.check(1, b"n1", timestamp=100, now=101) is Verdict.REPLAYED
    assert guard.check(2, b"n1", timestamp=100, now=101) is Verdict.FRESH  # other sender


def test_stale_and_future_timestamps() -> None:
    guard = ReplayGuard(window=60)
    assert guard.check(1, b"a", timestamp=0, now=61) is Verdict.STALE
    assert guard.check(1, b"b", timestamp=200, now=100) is Verdict.STALE
    assert guard.check(1, b"c", timestamp=159, now=100) is Verdict.FRESH


def test_a_replay_is_caught_for_as_long_as_its_timestamp_is_accepted() -> None:
    guard = ReplayGuard(window=60)
    assert guard.check(1, b"n", timestamp=160, now=100) is Verdict.FRESH  # clock ahead by 60
    # At now=219 the timestamp is still within the window: the nonce must still be known.
    assert guard.check(1, b"n", timestamp=160, now=219) is Verdict.REPLAYED
    assert guard.check(1, b"n", timestamp=160, now=221) is Verdict.STALE


def test_old_nonces_are_forgotten() -> None:
    guard = ReplayGuard(window=10)
    for i in range(100):
        guard.check(1, bytes([i]), timestamp=float(i), now=float(i))
    assert len(guard) <= 21
