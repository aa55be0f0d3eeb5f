"""The service's background loops survive failing passes and are watched."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from glidein_ext.errors import TaskQueueError
from glidein_ext.tq.client.protocol import Registration
from glidein_ext.tq.service.server import build_app, open_store
from glidein_ext.tq.service.settings import TqSettings
from glidein_ext.tq.service.store import Store


def _settings(tmp_path: Path, **settings: Any) -> TqSettings:
    return TqSettings(
        database=str(tmp_path / "tq.sqlite"),
        operator_token="op",  # noqa: S106 (a test token)
        pilot_token="pi",  # noqa: S106
        reap_interval=1,
        **settings,
    )


def _poll(probe: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_reaper_survives_database_errors_and_reaps_afterwards(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two passes fail with ``database is locked``; the third reaps the lapsed pilot."""
    clock = [1000.0]
    settings = _settings(tmp_path, heartbeat_timeout=10)
    store: Store = open_store(settings)
    store.clock = lambda: clock[0]
    lost = store.register(Registration(site="S", host="h")).pilot_id
    clock[0] += 60  # its heartbeat lapsed
    real_reap = store.reap
    calls: list[int] = []

    def flaky_reap() -> list[int]:
        calls.append(1)
        if len(calls) <= 2:
            raise TaskQueueError("database error: (sqlite3.OperationalError) database is locked")
        return real_reap()

    store.reap = flaky_reap  # type: ignore[method-assign]
    with TestClient(build_app(store, settings)) as http:

        def reaped() -> dict[str, Any] | None:
            health: dict[str, Any] = http.get("/healthz").json()
            return health if health["loops"]["reaper"]["passes"] >= 1 else None

        health = _poll(reaped, 15, "a successful reaper pass after two failures")
    reaper = health["loops"]["reaper"]
    assert reaper["errors"] == 2 and "database is locked" in reaper["last_error"]
    assert reaper["last_ok"] is not None and not reaper["stuck"]
    assert health["status"] == "ok"
    assert store.status().pilots == {"S": {"lost": 1}}, lost
    logged = [r for r in caplog.records if "reaper pass failed" in r.getMessage()]
    assert len(logged) == 2


def test_a_stuck_loop_makes_healthz_unhealthy(tmp_path: Path) -> None:
    settings = _settings(tmp_path, loop_stuck_after=1)
    store = open_store(settings)
    release = threading.Event()

    def hanging_reap() -> list[int]:
        release.wait(30)
        return []

    store.reap = hanging_reap  # type: ignore[method-assign]
    with TestClient(build_app(store, settings)) as http:
        assert http.get("/healthz").status_code == 200

        def unhealthy() -> Any:
            answer = http.get("/healthz")
            return answer if answer.status_code == 503 else None

        answer = _poll(unhealthy, 10, "/healthz to report the hanging reaper")
        assert answer.json()["loops"]["reaper"]["stuck"] is True
        assert answer.json()["status"] == "stuck: reaper"
        release.set()
        _poll(lambda: http.get("/healthz").status_code == 200, 10, "the reaper to recover")
