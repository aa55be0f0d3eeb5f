"""The Task Queue client keeps a connection alive between calls close together, and opens a new
one after a pause (a real ``tq serve`` behind a TCP relay that counts the connections)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from glidein_ext.errors import TaskQueueAuthError
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.connections import REUSE_WITHIN
from glidein_ext.tq.service.httpguard import KEEP_ALIVE


class Relay:
    """Accepts on 127.0.0.1 (port 0) and pipes each connection to ``target``; counts them."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self.threads: list[threading.Thread] = []
        self.sockets: list[socket.socket] = []
        self.accepting = threading.Thread(target=self._accept, daemon=True)
        self.accepting.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            server = socket.create_connection(self.target)
            self.sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                thread = threading.Thread(target=self._pipe, args=(a, b), daemon=True)
                thread.start()
                self.threads.append(thread)

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.listener.close()
        for each in self.sockets:
            each.close()


@pytest.fixture
def relay(
    tq_server: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Any, Relay]]:
    """A served Task Queue behind a counting relay; no proxy set (a test sets its own)."""
    for name in ("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    server = tq_server()
    host, port = server.url.removeprefix("http://").split(":")
    relay = Relay((host, int(port)))
    try:
        yield server, relay
    finally:
        relay.close()


def test_calls_within_the_window_share_one_connection_and_a_pause_opens_another(
    relay: tuple[Any, Relay], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, counting = relay
    assert REUSE_WITHIN <= KEEP_ALIVE / 2  # the default window: well inside the server's
    client = TqClient(f"http://127.0.0.1:{counting.port}", server.operator_token, reuse_within=1.0)
    client.status()
    client.status()
    client.status()
    assert counting.accepted == 1
    time.sleep(1.2)
    client.status()
    assert counting.accepted == 2
    client.status()
    assert counting.accepted == 2
    # Another thread has a connection of its own.
    thread = threading.Thread(target=client.status)
    thread.start()
    thread.join()
    assert counting.accepted == 3


def test_an_error_answer_on_a_kept_connection_is_translated_and_the_next_call_works(
    relay: tuple[Any, Relay], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, counting = relay
    url = f"http://127.0.0.1:{counting.port}"
    bad = TqClient(url, "not-the-token", throttle=False)
    with pytest.raises(TaskQueueAuthError, match=url):
        bad.status()
    with pytest.raises(TaskQueueAuthError):
        bad.status()
    good = TqClient(url, server.operator_token)
    assert good.status().workflows == ()


def test_a_proxied_url_keeps_urllib(
    relay: tuple[Any, Relay], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, counting = relay
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing there: must be bypassed
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    client = TqClient(f"http://127.0.0.1:{counting.port}", server.operator_token)
    client.status()
    client.status()
    assert counting.accepted == 1  # bypassed: kept alive
    monkeypatch.setenv("no_proxy", "")
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{counting.port}")  # the relay as a proxy
    proxied = TqClient(f"http://127.0.0.1:{counting.port}", server.operator_token)
    proxied.status()
    proxied.status()
    assert counting.accepted == 3  # urllib: a new connection each call
