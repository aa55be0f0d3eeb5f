"""The API's door (ASGI middleware): a token before anything is read, then a bounded body.

A call under ``/api/v1`` without one of the service's bearer tokens is answered 401 before its body
is read, so an unauthenticated client cannot make the TQ buffer or parse anything; which token a
call needs (pilot or operator) is still checked by the call itself.  An authenticated body is read
here, at most ``max_body`` bytes (413 beyond: by its Content-Length at once, or as soon as the
bytes received pass the limit), then handed to the application whole.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


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


class RequestGuard:
    """Token first, then the body within ``max_body`` bytes, for every path under ``prefix``."""

    def __init__(self, app: Asgi, tokens: Sequence[str], max_body: int, prefix: str) -> None:
        self.app = app
        self.tokens = [token.encode() for token in tokens if token]
        self.max_body = max_body
        self.prefix = prefix

    def _authorised(self, headers: Sequence[tuple[bytes, bytes]]) -> bool:
        given = b""
        for name, value in headers:
            if name.lower() == b"authorization":
                scheme, _, credentials = value.partition(b" ")
                if scheme.lower() == b"bearer":
                    given = credentials.strip()
        found = False
        for token in self.tokens:  # every token compared: the time does not say which matched
            found |= hmac.compare_digest(given, token)
        return found and bool(given)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        headers: Sequence[tuple[bytes, bytes]] = scope.get("headers", [])
        if not self._authorised(headers):
            await _answer(
                send,
                401,
                "a valid operator token or pilot token is required",
                [(b"www-authenticate", b"Bearer")],
            )
            return
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
        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for the disconnect, as the server does

        await self.app(scope, replay, send)
