"""A small HTTP client of the Task Queue API, stdlib only (pilots run where pip cannot reach).

HTTP and socket errors are translated here: 401 TaskQueueAuthError, 404 TaskQueueNotFound,
409 StaleMasterError, 422 TaskQueueRequestError, anything else (or no answer) TaskQueueError.
The answers are parsed into the protocol's dataclasses (``tq.protocol``); a malformed answer is a
TaskQueueError naming the call and the field.  Python 3.9 and the standard library only: the
pilot agent runs it.
"""

from __future__ import annotations

import functools
import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from glidein_ext.errors import (
    StaleMasterError,
    TaskQueueAuthError,
    TaskQueueError,
    TaskQueueNotFound,
    TaskQueueRequestError,
)
from glidein_ext.tq.protocol import (
    Assignment,
    Claim,
    ClaimAnswer,
    Completion,
    CompletionAnswer,
    HeartbeatAnswer,
    RegisterAnswer,
    Registration,
    SiteAssign,
    SiteAssignAnswer,
    SiteSync,
    SiteSyncAnswer,
    Status,
    SubmitAnswer,
    parse,
    parse_assignment,
    to_json,
)

API = "/api/v1"
T = TypeVar("T")


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
        try:
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
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:  # noqa: S310
                raw = answer.read()
        except urllib.error.HTTPError as exc:
            detail = _detail(exc)
            if exc.code == 401:
                raise TaskQueueAuthError(f"{self.url}: {detail}") from None
            if exc.code == 404:
                raise TaskQueueNotFound(detail) from None
            if exc.code == 409:
                raise StaleMasterError(detail) from None
            if exc.code == 422:
                raise TaskQueueRequestError(detail) from None
            raise TaskQueueError(f"{self.url}{path}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            # HTTPException: a malformed port (InvalidURL), a cut answer (IncompleteRead)
            reason = getattr(exc, "reason", exc)
            raise TaskQueueError(f"cannot reach the Task Queue at {self.url}: {reason}") from None
        except ValueError as exc:  # a malformed URL or token
            raise TaskQueueError(f"cannot call the Task Queue at {self.url!r}: {exc}") from None
        try:
            return json.loads(raw or b"null")
        except ValueError as exc:
            raise TaskQueueError(f"{self.url}{path}: answer is not JSON: {exc}") from None

    # --- pilots ---

    def register(self, registration: Registration) -> RegisterAnswer:
        return self._post(f"{API}/pilots", to_json(registration), RegisterAnswer)

    def request(self, pilot_id: int, cached: Sequence[str] | None = None) -> Assignment | None:
        """Seed IV-E: the pilot's next task, None when nothing fits now."""
        path = f"{API}/pilots/{pilot_id}/request"
        answer = self.call("POST", path, {"cached": _listed(cached)})
        return self._parsed(path, parse_assignment, answer)

    def heartbeat(self, pilot_id: int, cached: Sequence[str] | None = None) -> HeartbeatAnswer:
        path = f"{API}/pilots/{pilot_id}/heartbeat"
        return self._post(path, {"cached": _listed(cached)}, HeartbeatAnswer)

    def complete(self, pilot_id: int, completion: Completion) -> CompletionAnswer:
        path = f"{API}/pilots/{pilot_id}/complete"
        return self._post(path, to_json(completion), CompletionAnswer)

    def deregister(self, pilot_id: int) -> None:
        self.call("DELETE", f"{API}/pilots/{pilot_id}")

    # --- a distributed site's master (seed 000 III.B) ---

    def claim_master(self, site: str, claim: Claim) -> ClaimAnswer:
        return self._post(f"{API}/sites/{_quoted(site)}/master", to_json(claim), ClaimAnswer)

    def sync(self, site: str, call: SiteSync) -> SiteSyncAnswer:
        """Completions, dead workers, undelivered tasks; the runnable tasks wanted."""
        return self._post(f"{API}/sites/{_quoted(site)}/sync", to_json(call), SiteSyncAnswer)

    def assign(self, site: str, call: SiteAssign) -> SiteAssignAnswer:
        return self._post(f"{API}/sites/{_quoted(site)}/assign", to_json(call), SiteAssignAnswer)

    # --- operators ---

    def submit(self, workflow: Mapping[str, Any]) -> SubmitAnswer:
        """Submit a workflow (the JSON form of a workflow file)."""
        return self._post(f"{API}/workflows", workflow, SubmitAnswer)

    def status(self) -> Status:
        path = f"{API}/status"
        return self._parsed(path, functools.partial(parse, Status), self.call("GET", path))

    # --- answers ---

    def _post(self, path: str, body: Any, kind: type[T]) -> T:
        return self._parsed(path, functools.partial(parse, kind), self.call("POST", path, body))

    def _parsed(self, path: str, read: Callable[[Any], T], answer: Any) -> T:
        try:
            return read(answer)
        except ValueError as exc:
            raise TaskQueueError(f"{self.url}{path}: malformed answer: {exc}") from None


def _quoted(site: str) -> str:
    return urllib.parse.quote(site, safe="")


def _listed(cached: Sequence[str] | None) -> list[str] | None:
    return None if cached is None else list(cached)


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
