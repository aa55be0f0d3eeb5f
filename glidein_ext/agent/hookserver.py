"""The agent's end of the hook link: a unix socket server in the glidein's start directory.

One request per connection (``glidein_ext.glidein.agentlink``: one JSON line each way), each in a
thread of its own (a fetch may wait a little for a lane's task).  Only peers of the agent's own
uid are answered (``SO_PEERCRED``); the socket lives in the link directory (mode 0700) and is
removed when the server stops.  Operations, for :class:`~glidein_ext.agent.board.Board`:

=========  ================================================  ==============================
op         fields                                            answer
=========  ================================================  ==============================
fetch      slot: name, cpus, memory, disk (KiB),             ad: the job ad, or ""
           total_cpus, total_memory, partitionable
reply      task, attempt, accept                             ok
evict      task, attempt                                     ok
prepare    task, attempt, starter (pid)                      ok: may the job run
exit       task, attempt, reason, exit_code, signal,         ok
           by_signal, duration
status     (none)                                            the board's summary
=========  ================================================  ==============================

A malformed request gets ``{"error": ...}``; the server never dies of one.  Python 3.9, standard
library only.
"""

from __future__ import annotations

import logging
import os
import socket
import socketserver
import struct
import threading
from collections.abc import Mapping
from typing import Any

from glidein_ext.agent.board import Board
from glidein_ext.agent.handoff import Key, SlotView
from glidein_ext.errors import AgentLinkError
from glidein_ext.glidein import agentlink

log = logging.getLogger("glidein_ext.agent.hooks")
READ_TIMEOUT = 10.0


def _int(request: Mapping[str, Any], name: str, low: int = 0) -> int:
    value = request.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"field {name!r} must be an integer >= {low}")
    return value


def _opt_int(request: Mapping[str, Any], name: str) -> int | None:
    value = request.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"field {name!r} must be an integer or null")
    return value


def _key(request: Mapping[str, Any]) -> Key:
    return _int(request, "task", 1), _int(request, "attempt", 0)


def slot_of(raw: Any) -> SlotView:
    if not isinstance(raw, dict):
        raise ValueError("field 'slot' must be an object")
    name = raw.get("name", "")
    return SlotView(
        name=name if isinstance(name, str) else "",
        cpus=_int(raw, "cpus"),
        memory=_int(raw, "memory"),
        disk=_int(raw, "disk"),
        total_cpus=_int(raw, "total_cpus"),
        total_memory=_int(raw, "total_memory"),
        partitionable=raw.get("partitionable") is True,
    )


def dispatch(board: Board, request: Mapping[str, Any]) -> dict[str, Any]:
    """One request's answer (ValueError for a malformed one)."""
    op = request.get("op")
    if op == "fetch":
        return {"ad": board.fetch(slot_of(request.get("slot")))}
    if op == "reply":
        board.replied(_key(request), request.get("accept") is True)
        return {"ok": True}
    if op == "evict":
        board.evicting(_key(request))
        return {"ok": True}
    if op == "prepare":
        return {"ok": board.prepared(_key(request), _int(request, "starter", 1))}
    if op == "exit":
        reason = request.get("reason")
        board.exited(
            _key(request),
            reason if isinstance(reason, str) else "exit",
            _opt_int(request, "exit_code"),
            _opt_int(request, "signal") if request.get("by_signal") is True else None,
        )
        return {"ok": True}
    if op == "status":
        return {"status": board.status()}
    raise ValueError(f"unknown op {op!r}")


def peer_uid(sock: socket.socket) -> int | None:
    """The connecting process's uid (Linux SO_PEERCRED); None where it cannot be known."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    data = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    return int(struct.unpack("3i", data)[1])


class _Handler(socketserver.BaseRequestHandler):
    server: HookServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(READ_TIMEOUT)
        try:
            uid = peer_uid(sock)
            if uid is not None and uid != os.geteuid():
                log.warning("hook link: refused a peer of uid %d", uid)
                return
            request = agentlink.decode(agentlink.read_message(sock))
            answer = dispatch(self.server.board, request)
        except (AgentLinkError, ValueError) as exc:
            answer = {"error": str(exc)[:500]}
        except OSError as exc:
            log.info("hook link: a hook went away: %s", exc)
            return
        except Exception as exc:  # one bad request never ends the server (logged)
            log.exception("hook link: internal error")
            answer = {"error": f"internal error: {exc!r}"[:500]}
        try:
            sock.sendall(agentlink.encode(answer))
        except (OSError, AgentLinkError) as exc:
            log.info("hook link: could not answer a hook: %s", exc)


class HookServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """Serves the hooks of one glidein; :meth:`start` and :meth:`stop`."""

    daemon_threads = True
    board: Board

    def __init__(self, start_dir: str, board: Board) -> None:
        self.start_dir = start_dir
        self.board = board
        self.path = agentlink.socket_path(start_dir)
        agentlink.make_link_dir(start_dir)
        try:
            os.unlink(self.path)  # a dead agent's socket
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise AgentLinkError(f"cannot remove the old socket {self.path}: {exc}") from None
        with agentlink.socket_address(self.path) as address:
            try:
                super().__init__(address, _Handler)
            except OSError as exc:
                raise AgentLinkError(f"cannot listen on {self.path}: {exc.strerror}") from None
        os.chmod(self.path, 0o600)
        self._thread: threading.Thread | None = None

    def start(self) -> HookServer:
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.5}, name="hook-link"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join()
            self._thread = None
        self.server_close()
        try:
            os.unlink(self.path)
        except OSError as exc:
            log.info("hook link: removing %s: %s", self.path, exc)
