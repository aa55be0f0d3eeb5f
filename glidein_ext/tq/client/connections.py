"""The Task Queue client's keep-alive connections: one per (thread, base URL), reused while fresh.

The service closes a keep-alive connection that was idle for 5 s (``tq.service.httpguard``'s
``KEEP_ALIVE``).  A request sent on a connection the server is closing is lost after it left, and
a call that must not be repeated is then not resent.  So a connection is reused only when its last
answer came less than ``REUSE_WITHIN`` seconds ago (:func:`reusable`), well inside the server's
window; else it is closed and a new one opened.  A failure on a reused connection is the caller's
to translate as any other (nothing is resent here).  A URL that a proxy applies to (``http_proxy``,
``https_proxy``, ``no_proxy``: urllib's rules, :func:`proxied`) is left to urllib by the client.

Errors are raised the way ``urllib.request.urlopen`` raises them, so the client translates both
alike: an OSError while sending (connecting, the TLS handshake) as ``URLError`` with it as the
reason, one while reading the answer as itself, an answer other than 2xx as ``HTTPError`` (no
redirect is followed: the service sends none).

Python 3.9, standard library only.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import socket
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass

REUSE_WITHIN = 2.0  # seconds since its last answer a connection is reused (the server: 5)


def reusable(last_used: float, now: float, within: float = REUSE_WITHIN) -> bool:
    """Whether a connection whose last answer came at ``last_used`` may carry a request at
    ``now`` (a clock that went back: no)."""
    return 0.0 <= now - last_used < within


def proxied(url: str, proxies: Mapping[str, str] | None = None) -> bool:
    """Whether urllib would send a request for ``url`` through a proxy (``proxies``: by scheme,
    else the environment's; ``no_proxy`` bypasses, as in urllib's ProxyHandler).  A URL that
    does not parse counts as proxied: it stays on urllib, whose error the caller translates."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return True
    found = urllib.request.getproxies() if proxies is None else proxies
    if parts.scheme not in found:
        return False
    return not (parts.netloc and urllib.request.proxy_bypass(parts.netloc))


@dataclass
class _Held:
    connection: http.client.HTTPConnection
    last_used: float


class _ThreadHeld:
    """One thread's connections, closed when the thread (or the client) is gone: not left to
    the garbage collector's unclosed-socket warning."""

    def __init__(self) -> None:
        self.held: dict[str, _Held] = {}

    def __del__(self) -> None:
        for held in self.held.values():
            held.connection.close()


class Connections:
    """The open connections of one client, per thread (the agent's threads share one client;
    a connection carries one exchange at a time)."""

    def __init__(
        self, context: ssl.SSLContext | None, within: float, clock: Callable[[], float]
    ) -> None:
        self.context = context
        self.within = within
        self.clock = clock
        self._local = threading.local()
        self._waiting: set[http.client.HTTPConnection] = set()  # abortable exchanges under way
        self._waiting_lock = threading.Lock()

    def _held(self) -> dict[str, _Held]:
        mine: _ThreadHeld | None = getattr(self._local, "mine", None)
        if mine is None:
            mine = self._local.mine = _ThreadHeld()
        return mine.held

    def _take(self, base: str, timeout: float) -> http.client.HTTPConnection:
        held = self._held().pop(base, None)
        if held is not None:
            if reusable(held.last_used, self.clock(), self.within):
                held.connection.timeout = timeout
                if held.connection.sock is not None:
                    held.connection.sock.settimeout(timeout)
                return held.connection
            held.connection.close()
        netloc = urllib.parse.urlsplit(base).netloc
        if base.startswith("https://"):
            return http.client.HTTPSConnection(netloc, timeout=timeout, context=self.context)
        return http.client.HTTPConnection(netloc, timeout=timeout)

    def exchange(
        self,
        base: str,
        method: str,
        path: str,
        data: bytes | None,
        headers: Mapping[str, str],
        timeout: float,
        abortable: bool = False,
    ) -> bytes:
        """Send one request to ``base + path`` and read its whole answer's body; ``abortable``:
        :meth:`abort_waiting` may cut it short (a standing offer, when the pilot stops)."""
        connection = self._take(base, timeout)
        target = urllib.parse.urlsplit(base).path.rstrip("/") + path
        if abortable:
            with self._waiting_lock:
                self._waiting.add(connection)
        try:
            try:
                connection.request(method, target, body=data, headers=dict(headers))
            except OSError as exc:  # as urllib: no connection, a refused certificate, ...
                raise urllib.error.URLError(exc) from None
            answer = connection.getresponse()
            raw = answer.read()
        except BaseException:
            connection.close()
            raise
        finally:
            if abortable:
                with self._waiting_lock:
                    self._waiting.discard(connection)
        if answer.will_close:
            connection.close()
        else:
            self._held()[base] = _Held(connection, self.clock())
        if not 200 <= answer.status < 300:
            raise urllib.error.HTTPError(
                base + path, answer.status, answer.reason, answer.headers, io.BytesIO(raw)
            )
        return raw

    def abort_waiting(self) -> int:
        """Cut the abortable exchanges under way, from any thread: their sockets are shut down,
        so each ends at once with the error of a connection the server closed; how many."""
        with self._waiting_lock:
            waiting = list(self._waiting)
        for connection in waiting:
            sock = connection.sock
            if sock is not None:
                with contextlib.suppress(OSError):  # it ended meanwhile
                    sock.shutdown(socket.SHUT_RDWR)
        return len(waiting)
