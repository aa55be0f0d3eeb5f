"""When the Task Queue client reuses a kept-alive connection, and when urllib's proxies apply."""

from __future__ import annotations

import pytest

from glidein_ext.tq.client.connections import REUSE_WITHIN, proxied, reusable


def test_a_connection_is_reused_only_within_the_window() -> None:
    assert reusable(100.0, 100.0)
    assert reusable(100.0, 100.0 + REUSE_WITHIN - 0.01)
    assert not reusable(100.0, 100.0 + REUSE_WITHIN)
    assert not reusable(100.0, 99.0)  # a clock that went back
    assert not reusable(100.0, 100.0, within=0.0)  # 0: never


def test_a_proxy_for_the_scheme_applies_unless_bypassed(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    proxies = {"http": "http://proxy:3128"}
    assert proxied("http://tq.example:8000", proxies)
    assert not proxied("https://tq.example:8000", proxies)
    assert not proxied("http://tq.example:8000", {})
    monkeypatch.setenv("no_proxy", "tq.example")
    assert not proxied("http://tq.example:8000", proxies)
    assert proxied("http://other.example:8000", proxies)


def test_the_environments_proxies_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("no_proxy", "NO_PROXY", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", "http://proxy:3128")
    assert proxied("http://tq.example:8000")
    assert not proxied("https://tq.example:8000")


def test_a_url_that_does_not_parse_stays_on_urllib() -> None:
    # urllib's own error for it becomes the client's one-line TaskQueueError
    assert proxied("http://[::1:8080", {}) is True
