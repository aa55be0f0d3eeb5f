"""A raw JSON POST to a Task Queue on 127.0.0.1: for tests that send what the client refuses."""

from __future__ import annotations

import http.client
import json
import threading
import time
from typing import Any

from glidein_ext.testbed.tq_server import healthz_seconds as testbed_healthz


def request(
    url: str, method: str, path: str, token: str, body: bytes | None = None, timeout: float = 30.0
) -> tuple[int, str]:
    """``method`` ``url`` + ``path`` with a bearer token (and ``body`` as JSON, if any): (status,
    answer text)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        headers = {"Authorization": f"Bearer {token}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body, headers)
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()


def post_json(url: str, path: str, body: Any, token: str, timeout: float = 30.0) -> tuple[int, str]:
    """POST ``body`` as JSON to ``url`` + ``path`` with a bearer token: (status, answer text)."""
    return request(url, "POST", path, token, json.dumps(body).encode(), timeout)


def healthz_seconds(url: str, timeout: float = 60.0) -> float:
    """Seconds one ``GET /healthz`` of the Task Queue at ``url`` took (it must answer 200)."""
    host, port = url.removeprefix("http://").split(":")
    return testbed_healthz(host, int(port), timeout)


def healthz_while(
    url: str, busy: threading.Thread, at_least: float = 0.0, timeout: float = 60.0
) -> list[float]:
    """Probe ``/healthz`` every 20 ms while ``busy`` runs (and for ``at_least`` seconds), then
    join it: the probes' durations."""
    health: list[float] = []
    started = time.monotonic()
    while busy.is_alive() or time.monotonic() - started < at_least:
        health.append(healthz_seconds(url, timeout))
        time.sleep(0.02)
    busy.join()
    return health
