"""A raw JSON POST to a Task Queue on 127.0.0.1: for tests that send what the client refuses."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any


def post_json(url: str, path: str, body: Any, token: str, timeout: float = 30.0) -> tuple[int, str]:
    """POST ``body`` as JSON to ``url`` + ``path`` with a bearer token: (status, answer text)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request(
            "POST",
            path,
            json.dumps(body),
            {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()


def healthz_seconds(url: str, timeout: float = 60.0) -> float:
    """Seconds one ``GET /healthz`` of the Task Queue at ``url`` took (it must answer 200)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    start = time.perf_counter()
    try:
        conn.request("GET", "/healthz")
        answer = conn.getresponse()
        answer.read()
    finally:
        conn.close()
    assert answer.status == 200
    return time.perf_counter() - start
