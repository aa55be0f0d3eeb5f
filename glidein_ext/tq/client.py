"""A small HTTP client of the Task Queue API, stdlib only (pilots run where pip cannot reach).

HTTP and socket errors are translated here: 401 TaskQueueAuthError, 404 TaskQueueNotFound,
422 TaskQueueRequestError, anything else (or no answer) TaskQueueError.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from glidein_ext.errors import (
    TaskQueueAuthError,
    TaskQueueError,
    TaskQueueNotFound,
    TaskQueueRequestError,
)

API = "/api/v1"


class TqClient:
    """Calls of the pilot protocol and of operators, each one HTTP request."""

    def __init__(self, url: str, token: str, timeout: float = 30.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise TaskQueueError(f"Task Queue URL must be http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 (scheme checked in __init__)
            f"{self.url}{path}",
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:  # noqa: S310
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as exc:
            detail = _detail(exc)
            if exc.code == 401:
                raise TaskQueueAuthError(f"{self.url}: {detail}") from None
            if exc.code == 404:
                raise TaskQueueNotFound(detail) from None
            if exc.code == 422:
                raise TaskQueueRequestError(detail) from None
            raise TaskQueueError(f"{self.url}{path}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TaskQueueError(f"cannot reach the Task Queue at {self.url}: {reason}") from None
        except ValueError as exc:
            raise TaskQueueError(f"{self.url}{path}: answer is not JSON: {exc}") from None

    # --- pilots ---

    def register(self, **fields: Any) -> dict[str, Any]:
        answer: dict[str, Any] = self.call("POST", f"{API}/pilots", fields)
        return answer

    def request(self, pilot_id: int, cached: list[str] | None = None) -> dict[str, Any] | None:
        answer = self.call("POST", f"{API}/pilots/{pilot_id}/request", {"cached": cached})
        task: dict[str, Any] | None = answer["task"]
        return task

    def heartbeat(self, pilot_id: int, cached: list[str] | None = None) -> dict[str, Any]:
        answer: dict[str, Any] = self.call(
            "POST", f"{API}/pilots/{pilot_id}/heartbeat", {"cached": cached}
        )
        return answer

    def complete(self, pilot_id: int, **fields: Any) -> dict[str, Any]:
        answer: dict[str, Any] = self.call("POST", f"{API}/pilots/{pilot_id}/complete", fields)
        return answer

    def deregister(self, pilot_id: int) -> None:
        self.call("DELETE", f"{API}/pilots/{pilot_id}")

    # --- operators ---

    def submit(self, workflow: Any) -> dict[str, Any]:
        answer: dict[str, Any] = self.call("POST", f"{API}/workflows", workflow)
        return answer

    def status(self) -> dict[str, Any]:
        answer: dict[str, Any] = self.call("GET", f"{API}/status")
        return answer


def _detail(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read() or b"{}")
    except (ValueError, OSError):
        return exc.reason if isinstance(exc.reason, str) else f"HTTP {exc.code}"
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):  # FastAPI's validation errors
        first = detail[0] if detail else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return f"{where}: {first.get('msg', 'invalid')}"
    return str(detail) if detail else f"HTTP {exc.code}"
