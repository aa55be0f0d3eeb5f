"""The API's door (ASGI middleware): a token before anything is read, then a bounded body.

A call under ``/api/v1`` whose bearer token identifies nobody is answered 401 (a revoked or
expired credential 403) before its body is read, so an unauthenticated client cannot make the TQ
buffer or parse anything.  Who the token stands for (``tq.service.api.auth.Principal``) is left in
the scope (``PRINCIPAL``) for the calls, which check what it may do.  An authenticated body is read
here, at most ``max_body`` bytes (413 beyond: by its Content-Length at once, or as soon as the bytes
received pass the limit), then handed to the application whole.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from glidein_ext.errors import TaskQueueError
from glidein_ext.tq.service.api.auth import Principal, Refusal

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]
# the scope's key for the caller (tq.service.api.auth.Principal)
PRINCIPAL = "glidein_ext.principal"
log = logging.getLogger("glidein_ext.tq.service.api.guard")


async def _answer(
    send: Send, status: int, detail: str, extra: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def identified(
    identify: Callable[[bytes], Principal | Refusal], headers: Sequence[tuple[bytes, bytes]]
) -> Principal | Refusal:
    """Who the request's bearer token stands for (``identify``), or why it is refused."""
    given = b""
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, credentials = value.partition(b" ")
            if scheme.lower() == b"bearer":
                given = credentials.strip()
    try:
        return identify(given)
    except TaskQueueError as exc:  # the credentials' table cannot be read
        log.warning("cannot check a token: %s", exc)
        return Refusal(503, "the Task Queue cannot check tokens now (database)")


@dataclass
class RequestGuard:
    """Token first, then the body within ``max_body`` bytes, for every path under ``prefix``."""

    app: Asgi
    identify: Callable[[bytes], Principal | Refusal]
    max_body: int
    prefix: str

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        headers: Sequence[tuple[bytes, bytes]] = scope.get("headers", [])
        caller = identified(self.identify, headers)
        if isinstance(caller, Refusal):
            extra = [(b"www-authenticate", b"Bearer")] if caller.status == 401 else []
            await _answer(send, caller.status, caller.detail, extra)
            return
        scope[PRINCIPAL] = caller
        declared = next((v for k, v in headers if k.lower() == b"content-length"), None)
        if declared is not None and not declared.isdigit():
            await _answer(send, 400, "the Content-Length is not a number")
            return
        if declared is not None and int(declared) > self.max_body:
            await _answer(send, 413, f"the request body is larger than {self.max_body} bytes")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await _answer(send, 413, f"the request body is larger than {self.max_body} bytes")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, replay(b"".join(chunks), receive), send)


def replay(body: bytes, receive: Receive) -> Receive:
    """The body read once more, for the application behind, then whatever comes after it (the
    disconnect, as the server sends it)."""
    delivered = False

    async def again() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again
