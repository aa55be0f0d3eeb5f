"""The agent's end of the hook link: a unix socket server in the glidein's start directory.

One request per connection (``handoff.link``: one JSON line each way), each in a thread of its
own (a fetch may wait a little for a lane's task).  Only peers of the agent's own uid are answered
(``SO_PEERCRED``); the socket lives in the link directory (mode 0700) and is removed when the
server stops.  Operations, for :class:`~glidein_ext.glidein.handoff.board.Board`:

=========  ================================================  ==============================
op         fields                                            answer
=========  ================================================  ==============================
fetch      slot: name, cpus, memory, disk (KiB),             ad: the job ad object, or null
           total_cpus, total_memory, partitionable
reply      task, attempt, secret, accept                     ok
evict      task, attempt, secret                             ok
prepare    task, attempt, secret, starter (pid, unused)      ok: may the job run
exit       task, attempt, secret, reason, exit_code,         ok
           signal, by_signal, duration
status     (none)                                            the board's counts
=========  ================================================  ==============================

A payload runs as the agent's user too, so each call is bound to its task and to its caller
(``handoff.caller``): fetch, reply and evict only from the glidein's condor_startd; prepare only
from a condor_starter of that startd that runs no other task, and exit only from the starter the
task is bound to; and every call about a task carries the task's secret (from its job ad).  A
payload can neither take a task off the board, nor say that another task started, ended or was
evicted; status names no task.

A connection has :data:`DEADLINE` seconds in all to send its request (a hook sends it at once),
and each caller has a budget of connections served at a time (one thread each), told apart by
its ancestry before anything is read (``CallerGate.budget``): the startd's hooks
(:data:`STARTD_CONNECTIONS`), each condor_starter's hooks (:data:`STARTER_CONNECTIONS` per
starter), and everyone else together (:data:`MAX_CONNECTIONS`).  Beyond its budget a connection
is closed unanswered, so a process that opens many connections and trickles bytes cannot pile up
threads, and a payload holding every connection it may open keeps neither the startd's
FETCH_WORK nor another task's JOB_EXIT out.
A refused or malformed request gets ``{"error": ...}``; the server never dies of one.
Python 3.9, standard library only.
"""

from __future__ import annotations

import logging
import os
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Mapping
from typing import Any

from glidein_ext.errors import AgentLinkError
from glidein_ext.glidein.handoff import link
from glidein_ext.glidein.handoff.board import Board
from glidein_ext.glidein.handoff.caller import CallerGate, ProcFs
from glidein_ext.glidein.handoff.core import Key, SlotView
from glidein_ext.glidein.jsonfields import optional_int

log = logging.getLogger("glidein_ext.agent.hooks")
DEADLINE = 10.0  # seconds a connection has to send its whole request
MAX_CONNECTIONS = 32  # served at once for callers that are not HTCondor's hooks
STARTD_CONNECTIONS = 16  # the startd's FETCH_WORK, REPLY_FETCH, EVICT_CLAIM: one a slot at most
STARTER_CONNECTIONS = 4  # one condor_starter's PREPARE_JOB and JOB_EXIT (and its retries)


def _int(request: Mapping[str, Any], name: str, low: int = 0) -> int:
    value = request.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"field {name!r} must be an integer >= {low}")
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


def _task(board: Board, request: Mapping[str, Any]) -> Key:
    """The task a request is about, once its secret proves that the caller was handed it."""
    key = _key(request)
    if not board.secret_ok(key, request.get("secret")):
        raise AgentLinkError(f"no task {key[0]}.{key[1]} with that secret")
    return key


def dispatch(
    board: Board, request: Mapping[str, Any], gate: CallerGate, peer: int | None
) -> dict[str, Any]:
    """One request's answer (ValueError for a malformed one, AgentLinkError for a caller that
    may not make it); ``peer`` is the caller's pid."""
    op = request.get("op")
    if op == "fetch":
        gate.check_startd(peer)
        return {"ad": board.fetch(slot_of(request.get("slot")))}
    if op == "reply":
        gate.check_startd(peer)
        board.replied(_task(board, request), request.get("accept") is True)
        return {"ok": True}
    if op == "evict":
        gate.check_startd(peer)
        board.evicting(_task(board, request))
        return {"ok": True}
    if op == "prepare":
        starter = gate.starter(peer)
        return {"ok": board.prepared(_task(board, request), starter)}
    if op == "exit":
        starter = gate.starter(peer)
        key = _task(board, request)
        if board.starter_of(key) != starter:  # JOB_EXIT comes from the starter PREPARE_JOB did
            raise AgentLinkError(f"task {key[0]}.{key[1]} does not run under that condor_starter")
        reason = request.get("reason")
        board.exited(
            key,
            reason if isinstance(reason, str) else "exit",
            optional_int(request, "exit_code"),
            optional_int(request, "signal") if request.get("by_signal") is True else None,
        )
        return {"ok": True}
    if op == "status":
        return {"status": board.status()}
    raise ValueError(f"unknown op {op!r}")


def peer_credentials(sock: socket.socket) -> tuple[int, int] | None:
    """(pid, uid) of the connecting process (Linux SO_PEERCRED); None where unknown."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    data = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", data)
    return int(pid), int(uid)


class _Handler(socketserver.BaseRequestHandler):
    server: HookServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        deadline = time.monotonic() + self.server.deadline
        try:
            credentials = peer_credentials(sock)
            if credentials is not None and credentials[1] != os.geteuid():
                log.warning("hook link: refused a peer of uid %d", credentials[1])
                return
            peer = credentials[0] if credentials is not None else None
            request = link.decode(link.read_message(sock, deadline))
            answer = dispatch(self.server.board, request, self.server.gate, peer)
        except AgentLinkError as exc:
            log.warning("hook link: refused: %s", exc)
            answer = {"error": str(exc)[:500]}
        except ValueError as exc:
            answer = {"error": str(exc)[:500]}
        except OSError as exc:
            log.info("hook link: a hook went away: %s", exc)
            return
        except Exception as exc:  # one bad request never ends the server (logged)
            log.exception("hook link: internal error")
            answer = {"error": f"internal error: {exc!r}"[:500]}
        try:
            sock.settimeout(max(1.0, deadline - time.monotonic()))
            sock.sendall(link.encode(answer))
        except (OSError, AgentLinkError) as exc:
            log.info("hook link: could not answer a hook: %s", exc)


class HookServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """Serves the hooks of one glidein; :meth:`start` and :meth:`stop`."""

    daemon_threads = True
    board: Board

    def __init__(
        self,
        start_dir: str,
        board: Board,
        gate: CallerGate | None = None,
        *,
        deadline: float = DEADLINE,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.start_dir = start_dir
        self.board = board
        self.gate = gate or CallerGate(ProcFs())
        self.deadline = deadline
        self.budgets = {"other": max_connections, "startd": STARTD_CONNECTIONS}
        self._serving: dict[str, int] = {}  # budget -> connections served now
        self._held: dict[int, str] = {}  # id of a connection served -> its budget
        self._lock = threading.Lock()
        self.turned_away = 0
        self.path = link.socket_path(start_dir)
        link.make_link_dir(start_dir)
        try:
            os.unlink(self.path)  # a dead agent's socket
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise AgentLinkError(f"cannot remove the old socket {self.path}: {exc}") from None
        with link.socket_address(self.path) as address:
            try:
                super().__init__(address, _Handler)
            except OSError as exc:
                raise AgentLinkError(f"cannot listen on {self.path}: {exc.strerror}") from None
        os.chmod(self.path, 0o600)
        self._thread: threading.Thread | None = None

    def budget_of(self, request: socket.socket) -> str:
        """The caller's budget, from its ancestry (``CallerGate.budget``)."""
        try:
            credentials = peer_credentials(request)
        except OSError:
            return "other"
        return self.gate.budget(credentials[0] if credentials is not None else None)

    def process_request(self, request: Any, client_address: Any) -> None:
        """One thread per connection, within its caller's budget: beyond it, closed."""
        budget = self.budget_of(request)
        limit = self.budgets.get(budget, STARTER_CONNECTIONS)
        with self._lock:
            taken = self._serving.get(budget, 0) < limit
            if taken:
                self._serving[budget] = self._serving.get(budget, 0) + 1
                self._held[id(request)] = budget
            else:
                self.turned_away += 1
                away = self.turned_away
        if not taken:
            if away % 100 == 1:
                log.warning("hook link: %d connection(s) turned away (%s busy)", away, budget)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def _release(self, request: socket.socket) -> None:
        with self._lock:
            budget = self._held.pop(id(request), None)
            if budget is None:
                return
            left = self._serving.get(budget, 0) - 1
            if left > 0:
                self._serving[budget] = left
            else:
                self._serving.pop(budget, None)

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
