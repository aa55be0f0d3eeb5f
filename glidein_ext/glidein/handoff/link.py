"""The link between a glidein's HTCondor hooks and its pilot agent (both sides of the socket).

The agent listens on a unix socket in the glidein's start directory,
``START_DIR/.glidein-ext/agent/agent.sock``; the startd's fetch-work hooks and the starter's job
hooks (short-lived processes HTCondor runs) connect, send one JSON request on one line, and read
one JSON answer.  Trust, both ways:

- the directory is the glidein user's own, mode 0700: never group- or world-writable (nor
  readable), so no other user can reach the socket or swap it;
- a hook talks only to a socket in such a directory, owned by its own uid, reached without
  following a symlink (``lstat`` of both); anything else is an :class:`AgentLinkError`;
- the agent answers only peers of its own uid (``SO_PEERCRED``, Linux) and caps every message at
  :data:`MAX_MESSAGE` bytes; as a payload runs as that uid too, the agent also binds each call
  to its task and its caller (``handoff.server``, ``handoff.caller``).

Unix socket paths are limited to about 107 bytes; a longer start directory (glideinWMS's can be)
is reached through ``/proc/self/fd/N/agent.sock`` with N an open descriptor of the directory.

Python 3.9, standard library only: the hooks import this and must start fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from typing import Any

from glidein_ext.errors import AgentLinkError

PROTOCOL = 1
LINK_DIR = os.path.join(".glidein-ext", "agent")
SOCKET_NAME = "agent.sock"
MAX_MESSAGE = 1024 * 1024  # a job ad is a few KiB; this is a cap, not a size
MAX_SUN_PATH = 100  # below the kernel's 108 bytes, with room for the NUL


def link_dir(start_dir: str) -> str:
    return os.path.join(start_dir, LINK_DIR)


def socket_path(start_dir: str) -> str:
    return os.path.join(link_dir(start_dir), SOCKET_NAME)


def make_link_dir(start_dir: str) -> str:
    """Create (or take over) the link directory, mode 0700, ours; AgentLinkError if unsafe."""
    path = link_dir(start_dir)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
            os.chmod(path, 0o700)  # makedirs honours the umask; an old directory may be wider
    except OSError as exc:
        raise AgentLinkError(f"cannot create {path}: {exc.strerror}") from None
    check_dir(path)
    return path


def _check_ours(path: str, info: os.stat_result) -> None:
    """``path`` (``info``, its lstat) belongs to this process's effective uid."""
    if info.st_uid != os.geteuid():
        raise AgentLinkError(f"{path} belongs to uid {info.st_uid}, not to us ({os.geteuid()})")


def check_dir(path: str) -> None:
    """The directory is a real directory of ours, neither group- nor world-accessible."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise AgentLinkError(f"{path}: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise AgentLinkError(f"{path} is not a directory (a symlink or a file is refused)")
    _check_ours(path, info)
    if info.st_mode & 0o077:
        raise AgentLinkError(f"{path} is open to other users (mode {info.st_mode & 0o777:o})")


def check_socket(path: str) -> None:
    """``path`` is a unix socket owned by us (not a symlink to one)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise AgentLinkError(f"no agent socket at {path} (is the agent running?)") from None
    except OSError as exc:
        raise AgentLinkError(f"{path}: {exc.strerror}") from None
    if not stat.S_ISSOCK(info.st_mode):
        raise AgentLinkError(f"{path} is not a socket")
    _check_ours(path, info)


@contextlib.contextmanager
def socket_address(path: str) -> Iterator[str]:
    """An address for ``bind``/``connect``: the path itself, or, when it is too long for a unix
    socket, the same file through ``/proc/self/fd`` and an open descriptor of its directory."""
    if len(os.fsencode(path)) <= MAX_SUN_PATH:
        yield path
        return
    directory, name = os.path.split(path)
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise AgentLinkError(f"cannot open {directory}: {exc.strerror}") from None
    try:
        yield f"/proc/self/fd/{fd}/{name}"
    finally:
        os.close(fd)


def encode(message: dict[str, Any]) -> bytes:
    """One message on the wire: compact JSON and a newline."""
    data = json.dumps({"v": PROTOCOL, **message}, separators=(",", ":")).encode() + b"\n"
    if len(data) > MAX_MESSAGE:
        raise AgentLinkError(f"message of {len(data)} bytes is over the {MAX_MESSAGE} cap")
    return data


def decode(data: bytes) -> dict[str, Any]:
    """A message read from the wire; AgentLinkError unless it is one JSON object of ours."""
    if len(data) > MAX_MESSAGE:
        raise AgentLinkError(f"message over the {MAX_MESSAGE}-byte cap")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise AgentLinkError(f"malformed message: {exc}") from None
    if not isinstance(value, dict) or value.get("v") != PROTOCOL:
        raise AgentLinkError(f"not a protocol-{PROTOCOL} message")
    return value


def read_message(sock: socket.socket, deadline: float | None = None) -> bytes:
    """Read up to the first newline (or the end), at most MAX_MESSAGE bytes; with ``deadline``
    (``time.monotonic()``), the whole message must come by then (``socket.timeout`` otherwise,
    however slowly the bytes trickle in)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("the message did not come in time")
            sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if b"\n" in chunk:
            break
        if size > MAX_MESSAGE:
            raise AgentLinkError(f"message over the {MAX_MESSAGE}-byte cap")
    return b"".join(chunks).split(b"\n", 1)[0]


def call(start_dir: str, request: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
    """Send one request to the glidein's agent and return its answer (a hook's side).

    AgentLinkError when the link is unsafe or absent, the agent does not answer in ``timeout``
    seconds, or answers an error.
    """
    return call_until(start_dir, request, timeout, 0.0)


def call_until(
    start_dir: str, request: dict[str, Any], timeout: float, retry_for: float
) -> dict[str, Any]:
    """``call``, tried again while the agent does not answer (it turned the connection away, or
    was busy) for up to ``retry_for`` seconds in all; an answer, an error it answered or an
    unsafe link ends the tries at once."""
    path = socket_path(start_dir)
    data = encode(request)
    deadline = time.monotonic() + retry_for
    pause = 0.05
    while True:
        check_dir(link_dir(start_dir))
        check_socket(path)
        left = deadline - time.monotonic()
        answer = _exchange(path, data, timeout if retry_for <= 0 else max(0.5, min(timeout, left)))
        if isinstance(answer, dict):
            break
        if time.monotonic() + pause >= deadline:
            raise AgentLinkError(f"the agent at {path} did not answer: {answer}")
        time.sleep(pause)
        pause = min(1.0, pause * 2)
    if "error" in answer:
        raise AgentLinkError(f"the agent refused {request.get('op')!r}: {answer['error']}")
    return answer


def _exchange(path: str, data: bytes, timeout: float) -> dict[str, Any] | str:
    """One request and its answer; why there was none (closed unanswered, no agent, too slow)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        with socket_address(path) as address:
            sock.connect(address)
        sock.sendall(data)
        return decode(read_message(sock))
    except (OSError, AgentLinkError) as exc:
        return str(exc) or type(exc).__name__
    finally:
        sock.close()
