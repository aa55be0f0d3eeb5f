"""The pilots' fast path (tq.service.api.fastpath): well-formed hot calls (a pilot's token, a JSON
body of a declared length within the bound, its own pilot) are served by the handler and told to
the observers; everything else goes on to the application with its body intact."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

import pytest
from pydantic import BaseModel, Field
from starlette.responses import JSONResponse, Response

from glidein_ext.errors import TaskQueueNotFound
from glidein_ext.tq.service.api.auth import Principal, Refusal
from glidein_ext.tq.service.api.fastpath import FastCall, PilotFastPath

PILOT = Principal(pilot=True)


class Body(BaseModel):
    n: int = Field(ge=0, le=10)


class Recorder:
    """The application behind the fast path: records what reached it, body included."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        self.bodies.append(message["body"])
        await Response(b"app", status_code=299)(scope, receive, send)


Calls = list[tuple[int | None, int]]


TOKENS = {b"pilot": PILOT, b"operator": Principal(operator=True)}


def _identify(given: bytes) -> Principal | Refusal:
    return TOKENS.get(given) or Refusal(401, "no")


def _path(
    calls: Calls, fail: bool = False, seen: list[tuple[str, int]] | None = None
) -> tuple[PilotFastPath, Recorder]:
    async def handler(_who: Principal, pilot_id: int | None, body: Any) -> Response:
        if fail:
            raise TaskQueueNotFound("no task 7")
        calls.append((pilot_id, body.n))
        if seen is not None:
            seen.append(("handler", -1))
        return Response(b"fast", status_code=200)

    app = Recorder()
    fast = PilotFastPath(
        app,
        prefix="/api/v1",
        calls={"": FastCall(Body, handler), "request": FastCall(Body, handler)},
        identify=_identify,
        max_body=20,
        owns=lambda who, pilot_id: pilot_id == 5,
        answer_error=lambda exc: JSONResponse({"detail": str(exc)}, status_code=404),
    )
    if seen is not None:
        fast.count_arrivals(lambda method, path: seen.append((path, 0)))
        fast.observe(lambda method, path, status, _seconds: seen.append((path, status)))
    return fast, app


def _call(
    fast: PilotFastPath,
    path: str,
    body: bytes,
    token: bytes | None = b"pilot",
    content_type: bytes = b"application/json",
    length: bytes | None = None,
) -> tuple[int, bytes]:
    headers = [(b"content-type", content_type)]
    headers.append((b"content-length", str(len(body)).encode() if length is None else length))
    if token is not None:
        headers.append((b"authorization", b"Bearer " + token))
    scope: dict[str, Any] = {"type": "http", "method": "POST", "path": path, "headers": headers}
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(fast(scope, receive, send))
    return sent[0]["status"], sent[1]["body"]


def test_well_formed_calls_are_served_by_the_handler_and_observed() -> None:
    calls: Calls = []
    seen: list[tuple[str, int]] = []
    fast, app = _path(calls, seen=seen)
    assert _call(fast, "/api/v1/pilots", b'{"n": 3}') == (200, b"fast")
    assert _call(fast, "/api/v1/pilots/5/request", b'{"n": 4}') == (200, b"fast")
    assert calls == [(None, 3), (5, 4)]
    assert app.bodies == []
    # each counted as it arrives (0), before its handler runs, and observed once answered
    assert seen == [
        ("/api/v1/pilots", 0),
        ("handler", -1),
        ("/api/v1/pilots", 200),
        ("/api/v1/pilots/5/request", 0),
        ("handler", -1),
        ("/api/v1/pilots/5/request", 200),
    ]


def test_everything_else_reaches_the_application_with_its_body() -> None:
    calls: Calls = []
    seen: list[tuple[str, int]] = []
    fast, app = _path(calls, seen=seen)
    json_body = b"application/json"
    cases: list[tuple[str, bytes, bytes | None, bytes, bytes | None]] = [
        ("/api/v1/pilots/5/request", b'{"n": 11}', b"pilot", json_body, None),  # refused
        ("/api/v1/pilots/5/request", b"{not json", b"pilot", json_body, None),
        ("/api/v1/pilots/5/request", b"", b"pilot", json_body, None),
        ("/api/v1/pilots/6/request", b'{"n": 1}', b"pilot", json_body, None),  # not its own
        ("/api/v1/pilots/5/request", b'{"n": 1}', b"operator", json_body, None),
        ("/api/v1/pilots/5/request", b'{"n": 1}', None, json_body, None),
        ("/api/v1/pilots/5/request", b'{"n": 1}', b"forged", json_body, None),
        ("/api/v1/pilots/5/request", b'{"n": 1}', b"pilot", b"text/plain", None),
        ("/api/v1/pilots/5/request", b'{"n": 1}', b"pilot", json_body, b"x"),
        ("/api/v1/pilots/5/request", b'{"n": 1}', b"pilot", json_body, b"21"),  # past the bound
        ("/api/v1/pilots/5/request", b'{"n": 1}' + b" " * 13, b"pilot", json_body, b"8"),
        ("/api/v1/pilots/5/heartbeat", b'{"n": 1}', b"pilot", json_body, None),
        ("/api/v1/pilots/05/request", b'{"n": 1}', b"pilot", json_body, None),
        ("/api/v1/pilots/5/request/", b'{"n": 1}', b"pilot", json_body, None),
        ("/api/v1/pilots/", b'{"n": 1}', b"pilot", json_body, None),
        (f"/api/v1/pilots/{2**63}/request", b'{"n": 1}', b"pilot", json_body, None),
    ]
    for path, body, token, kind, length in cases:
        assert _call(fast, path, body, token, kind, length) == (299, b"app"), (path, token)
    assert app.bodies == [case[1] for case in cases]
    assert calls == []
    assert seen == []  # the application's own middleware counts what it serves


def test_a_store_error_is_answered_as_the_application_answers_it() -> None:
    fast, app = _path([], fail=True)
    status, body = _call(fast, "/api/v1/pilots/5/request", b'{"n": 1}')
    assert (status, json.loads(body)) == (404, {"detail": "no task 7"})
    assert app.bodies == []


def test_a_bug_in_a_handler_goes_on_to_the_server_and_is_measured_as_a_500() -> None:
    seen: list[tuple[str, int]] = []

    async def broken(_who: Principal, _pilot_id: int | None, _body: Any) -> Response:
        raise RuntimeError("a bug")

    fast, _ = _path([], seen=seen)
    fast.calls["request"] = FastCall(Body, broken)
    with pytest.raises(RuntimeError, match="a bug"):
        _call(fast, "/api/v1/pilots/5/request", b'{"n": 1}')
    assert seen == [("/api/v1/pilots/5/request", 0), ("/api/v1/pilots/5/request", 500)]
