"""The pilots' hot calls without FastAPI's routing and dependency resolution (ASGI middleware).

A burst of pilots makes three calls each: register, request a task, report its end.  FastAPI
resolves each call's dependencies (the caller, the pilot's owner, the path, the body) through a
general machinery that costs a good part of what the call costs (measured: ``bench/tq_bench.py``).
This middleware, inside the guard (``tq.service.api.guard``: the token is checked and the body read
already), serves those calls (and a busy pilot's ``complete-and-request``, which is one call
for the last two) when they are well formed: the caller is a pilot, the pilot in
the path is the caller's own, the body is JSON that the call's own pydantic model
(``tq.service.api.schemas``) accepts.  It then runs the very handler the FastAPI route runs, and
answers a store's error as the application's error handlers do.  Anything else (a bad token
kind, a foreign pilot, a body the model refuses, another method or path) goes on to FastAPI
unchanged, body included, so that every refusal keeps its status and its message, and the
OpenAPI description stays the routes'.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from starlette.responses import Response

from glidein_ext.errors import TaskQueueError
from glidein_ext.tq.client.limits import INT64_MAX
from glidein_ext.tq.service.api.auth import Principal
from glidein_ext.tq.service.api.guard import PRINCIPAL, Asgi, Receive, Scope, Send, replay

# handler(caller, pilot id or None, validated body) -> the answer
Handler = Callable[[Principal, "int | None", Any], Awaitable[Response]]


@dataclass(frozen=True)
class FastCall:
    """One hot call: its body's model and its handler (the FastAPI route's own)."""

    model: type[BaseModel]
    handler: Handler


class PilotFastPath:
    """Serves ``POST {prefix}/pilots`` (``calls[""]``) and ``POST {prefix}/pilots/ID/NAME``
    (``calls[NAME]``) when well formed (see the module); ``owns(caller, pilot_id)``: whether the
    pilot is the caller's (False, or an error: left to FastAPI, which refuses it);
    ``answer_error``: a store's error as the application answers it."""

    def __init__(
        self,
        app: Asgi,
        prefix: str,
        calls: Mapping[str, FastCall],
        owns: Callable[[Principal, int], bool],
        answer_error: Callable[[Exception], Response],
    ) -> None:
        self.app = app
        self.calls = dict(calls)
        self.owns = owns
        self.answer_error = answer_error
        names = "|".join(re.escape(name) for name in self.calls if name)
        self._path = re.compile(
            rf"{re.escape(prefix)}/pilots(?:/([1-9][0-9]{{0,18}})/({names}))?", re.ASCII
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        call, pilot_id, who = self._route(scope)
        if call is None or who is None:
            await self.app(scope, receive, send)
            return
        body = await _whole_body(receive)
        if body is None:  # the client left
            return
        parsed = _validated(call.model, body)
        if parsed is None:
            await self.app(scope, replay(body, receive), send)
            return
        try:
            answer = await call.handler(who, pilot_id, parsed)
        except (TaskQueueError, RecursionError) as exc:
            answer = self.answer_error(exc)
        await answer(scope, receive, send)

    def _route(self, scope: Scope) -> tuple[FastCall | None, int | None, Principal | None]:
        """The call, the pilot in its path and the caller, when this path may serve it."""
        if scope["type"] != "http" or scope["method"] != "POST":
            return None, None, None
        found = self._path.fullmatch(scope["path"])
        if found is None:
            return None, None, None
        who = scope.get(PRINCIPAL)
        if not isinstance(who, Principal) or not who.pilot or not _json_body(scope):
            return None, None, None
        if found.group(1) is None:
            return self.calls.get(""), None, who
        pilot_id = int(found.group(1))
        if pilot_id > INT64_MAX:
            return None, None, None
        try:
            if not self.owns(who, pilot_id):
                return None, None, None
        except TaskQueueError:  # no such pilot, or not the caller's: FastAPI says so
            return None, None, None
        return self.calls.get(found.group(2)), pilot_id, who


def _json_body(scope: Scope) -> bool:
    """The body is declared JSON (FastAPI parses it as JSON then, as here)."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-type":
            return bool(value.lower() == b"application/json")
    return False


def _validated(model: type[BaseModel], body: bytes) -> BaseModel | None:
    """The body as ``model`` accepts it, parsed as FastAPI parses it; None when refused."""
    if not body:
        return None
    try:
        return model.model_validate(json.loads(body))
    except (ValueError, RecursionError):  # ValidationError is a ValueError
        return None


async def _whole_body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)
