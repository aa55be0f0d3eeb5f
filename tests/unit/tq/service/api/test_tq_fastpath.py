"""The pilots' fast path (tq.service.api.fastpath): well-formed hot calls are served by the handler,
everything else goes on to the application with its body intact."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

from pydantic import BaseModel, Field
from starlette.responses import JSONResponse, Response

from glidein_ext.errors import TaskQueueNotFound
from glidein_ext.tq.service.api.auth import Principal
from glidein_ext.tq.service.api.fastpath import FastCall, PilotFastPath
from glidein_ext.tq.service.api.guard import PRINCIPAL

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


def _path(calls: Calls, fail: bool = False) -> tuple[PilotFastPath, Recorder]:
    async def handler(_who: Principal, pilot_id: int | None, body: Any) -> Response:
        if fail:
            raise TaskQueueNotFound("no task 7")
        calls.append((pilot_id, body.n))
        return Response(b"fast", status_code=200)

    app = Recorder()
    fast = PilotFastPath(
        app,
        prefix="/api/v1",
        calls={"": FastCall(Body, handler), "request": FastCall(Body, handler)},
        owns=lambda who, pilot_id: pilot_id == 5,
        answer_error=lambda exc: JSONResponse({"detail": str(exc)}, status_code=404),
    )
    return fast, app


def _call(
    fast: PilotFastPath,
    path: str,
    body: bytes,
    who: Principal | None = PILOT,
    content_type: bytes = b"application/json",
) -> tuple[int, bytes]:
    scope: dict[str, Any] = {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [(b"content-type", content_type)],
    }
    if who is not None:
        scope[PRINCIPAL] = who
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(fast(scope, receive, send))
    return sent[0]["status"], sent[1]["body"]


def test_well_formed_calls_are_served_by_the_handler() -> None:
    calls: Calls = []
    fast, app = _path(calls)
    assert _call(fast, "/api/v1/pilots", b'{"n": 3}') == (200, b"fast")
    assert _call(fast, "/api/v1/pilots/5/request", b'{"n": 4}') == (200, b"fast")
    assert calls == [(None, 3), (5, 4)]
    assert app.bodies == []


def test_everything_else_reaches_the_application_with_its_body() -> None:
    calls: Calls = []
    fast, app = _path(calls)
    cases = [
        ("/api/v1/pilots/5/request", b'{"n": 11}', PILOT, b"application/json"),  # refused
        ("/api/v1/pilots/5/request", b"{not json", PILOT, b"application/json"),
        ("/api/v1/pilots/5/request", b"", PILOT, b"application/json"),
        ("/api/v1/pilots/6/request", b'{"n": 1}', PILOT, b"application/json"),  # not its own
        ("/api/v1/pilots/5/request", b'{"n": 1}', Principal(operator=True), b"application/json"),
        ("/api/v1/pilots/5/request", b'{"n": 1}', None, b"application/json"),
        ("/api/v1/pilots/5/request", b'{"n": 1}', PILOT, b"text/plain"),
        ("/api/v1/pilots/5/heartbeat", b'{"n": 1}', PILOT, b"application/json"),
        ("/api/v1/pilots/05/request", b'{"n": 1}', PILOT, b"application/json"),
        (f"/api/v1/pilots/{2**63}/request", b'{"n": 1}', PILOT, b"application/json"),
    ]
    for path, body, who, kind in cases:
        assert _call(fast, path, body, who, kind) == (299, b"app"), path
    assert app.bodies == [body for _, body, _, _ in cases]
    assert calls == []


def test_a_store_error_is_answered_as_the_application_answers_it() -> None:
    fast, app = _path([], fail=True)
    status, body = _call(fast, "/api/v1/pilots/5/request", b'{"n": 1}')
    assert (status, json.loads(body)) == (404, {"detail": "no task 7"})
    assert app.bodies == []
