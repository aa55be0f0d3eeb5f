"""The pilots' hot calls served ahead of the application's middleware, routing and dependency
resolution.

A burst of pilots makes three calls each: register, request a task, report its end; a busy
pilot one, ``complete-and-request``.  FastAPI resolves each call's dependencies (the caller, the
pilot's owner, the path, the body) through a general machinery, and every call crosses the
middleware stack (Starlette's error and exception layers, the request metrics and counters, the
guard), each layer an ASGI call with its own wrapped ``send``: together a good part of what the
call costs the service (``bench/tq_call_cost_bench.py``).  :class:`TaskQueueApp` is FastAPI with a
front door: :class:`PilotFastPath` serves such a call itself when it is well formed, and hands
everything else to the application unchanged, body included, so that every refusal keeps its
status and message and the OpenAPI description stays the routes'.

Well formed is what the guard (``tq.service.api.guard``) and the route would accept: a ``POST``
of one of the calls' paths, a bearer token that identifies a pilot, a declared
``application/json`` body of a declared ``Content-Length`` within the guard's bound, the pilot in
the path the caller's own (a call for several pilots, ``reports``, checks each pilot's owner
itself), a body that the call's own pydantic model
(``tq.service.api.schemas``) accepts.  The fast path then runs the very handler the FastAPI route
runs, answers a store's error as the application's error handlers do, and tells each served call
to the run's counters as it arrives and to the request metrics once answered (what the
middleware it skipped would have recorded).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel
from starlette.responses import Response

from glidein_ext.errors import TaskQueueError
from glidein_ext.tq.client.limits import INT64_MAX
from glidein_ext.tq.service.api.auth import Principal, Refusal
from glidein_ext.tq.service.api.guard import Asgi, Receive, Scope, Send, identified, replay

# handler(caller, pilot id or None, validated body) -> the answer
Handler = Callable[[Principal, "int | None", Any], Awaitable[Response]]
# arrival(method, path): a call the fast path is to serve, as it arrives
Arrival = Callable[[str, str], None]
# observer(method, path, status, seconds): a call the fast path served, once answered
Observer = Callable[[str, str, int, float], None]


@dataclass(frozen=True)
class FastCall:
    """One hot call: its body's model and its handler (the FastAPI route's own)."""

    model: type[BaseModel]
    handler: Handler


class PilotFastPath:
    """Serves ``POST {prefix}/pilots`` (``calls[""]``), ``POST {prefix}/pilots/ID/NAME``
    (``calls[NAME]``) and ``POST {prefix}/pilots/NAME`` (``pilots_calls[NAME]``: calls for
    several pilots, whose handler checks each pilot's owner) when well formed (see the module),
    everything else by ``app``.
    ``identify``: a bearer token's principal (the guard's); ``max_body``: the guard's bound;
    ``owns(caller, pilot_id)``: whether the pilot is the caller's (False, or an error: left to
    the application, which refuses it); ``answer_error``: a store's error as the application
    answers it.  Who counts or measures the calls served here says so (``count_arrivals``,
    ``observe``)."""

    def __init__(
        self,
        app: Asgi,
        prefix: str,
        calls: Mapping[str, FastCall],
        identify: Callable[[bytes], Principal | Refusal],
        max_body: int,
        owns: Callable[[Principal, int], bool],
        answer_error: Callable[[Exception], Response],
        pilots_calls: Mapping[str, FastCall] | None = None,
    ) -> None:
        self.app = app
        self.calls = dict(calls)
        self.pilots_calls = dict(pilots_calls or {})
        self.identify = identify
        self.max_body = max_body
        self.owns = owns
        self.answer_error = answer_error
        self.observers: list[Observer] = []
        self.arrivals: list[Arrival] = []
        self._register = f"{prefix}/pilots"
        self._pilot = f"{prefix}/pilots/"

    def observe(self, observer: Observer) -> None:
        """``observer`` is told of every call served here from now on, once answered."""
        self.observers.append(observer)

    def count_arrivals(self, arrival: Arrival) -> None:
        """``arrival`` is told of every call served here from now on, before it runs (the
        run's counters count a request as it arrives: the call that finishes a workflow
        counts in it)."""
        self.arrivals.append(arrival)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = time.perf_counter()
        call, pilot_id, who = self._route(scope)
        if call is None or who is None:
            await self.app(scope, receive, send)
            return
        body = await _whole_body(receive)
        if body is None:  # the client left
            return
        parsed = _validated(call.model, body) if len(body) <= self.max_body else None
        if parsed is None:
            await self.app(scope, replay(body, receive), send)
            return
        for arrival in self.arrivals:
            arrival("POST", scope["path"])
        status = 500  # unless answered: a bug's exception goes on to the server, which says 500
        try:
            try:
                answer = await call.handler(who, pilot_id, parsed)
            except (TaskQueueError, RecursionError) as exc:
                answer = self.answer_error(exc)
            await answer(scope, receive, send)
            status = answer.status_code
        finally:
            seconds = time.perf_counter() - start
            for observer in self.observers:
                observer("POST", scope["path"], status, seconds)

    def _route(self, scope: Scope) -> tuple[FastCall | None, int | None, Principal | None]:
        """The call, the pilot in its path and the caller, when this path may serve it."""
        if scope["type"] != "http" or scope["method"] != "POST":
            return None, None, None
        path: str = scope["path"]
        if path == self._register:
            call, pilot_id = self.calls.get(""), None
        elif path.startswith(self._pilot):
            number, slash, name = path[len(self._pilot) :].partition("/")
            if not slash:
                call, pilot_id = self.pilots_calls.get(number), None
            else:
                call = self.calls.get(name) if name else None
                if call is None or not _pilot_number(number):
                    return None, None, None
                pilot_id = int(number)
        else:
            return None, None, None
        if call is None:
            return None, None, None
        who = self._pilot_caller(scope.get("headers", ()))
        if who is None:
            return None, None, None
        if pilot_id is not None:
            try:
                if not self.owns(who, pilot_id):
                    return None, None, None
            except TaskQueueError:  # no such pilot, or not the caller's: FastAPI says so
                return None, None, None
        return call, pilot_id, who

    def _pilot_caller(self, headers: Sequence[tuple[bytes, bytes]]) -> Principal | None:
        """The caller, when a pilot's, with a JSON body of a length within the bound; else None
        (the guard or the route answers)."""
        declared = json_body = None  # each the first such header, as the guard and FastAPI read
        for name, value in headers:
            lowered = name.lower()
            if lowered == b"content-length" and declared is None:
                declared = value
            elif lowered == b"content-type" and json_body is None:
                json_body = value.lower() == b"application/json"
        if not json_body or declared is None or not declared.isdigit():
            return None
        if int(declared) > self.max_body:
            return None
        who = identified(self.identify, headers)
        if isinstance(who, Refusal) or not who.pilot:
            return None
        return who


class TaskQueueApp(FastAPI):
    """FastAPI whose pilots' hot calls are served by ``fast_path`` (when set) before anything
    else: its middleware stack, its routing, its dependencies."""

    fast_path: PilotFastPath | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.fast_path is None:
            await super().__call__(scope, receive, send)
        else:
            await self.fast_path(scope, receive, send)

    async def behind(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The application as the fast path hands a call on to it."""
        await super().__call__(scope, receive, send)


def _pilot_number(text: str) -> bool:
    """A pilot id as the routes take it: decimal, no leading zero, within int64."""
    return (
        0 < len(text) <= 19
        and text.isascii()
        and text.isdigit()
        and text[0] != "0"
        and int(text) <= INT64_MAX
    )


def _validated(model: type[BaseModel], body: bytes) -> BaseModel | None:
    """The body as ``model`` accepts it, parsed and checked by pydantic in one pass; None when
    refused (the route, which parses it with ``json`` first, then answers for it)."""
    if not body:
        return None
    try:
        return model.model_validate_json(body)
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
