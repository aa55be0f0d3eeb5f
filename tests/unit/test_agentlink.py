"""The link between a glidein's hooks and its agent: one JSON line each way over a unix socket in
a private directory of the start dir (glidein.agentlink), served by agent.hookserver, used by the
hooks (glidein.fetchhook).  Real sockets in tmp_path; no HTCondor."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from glidein_ext.agent.board import Board
from glidein_ext.agent.handoff import Handoff
from glidein_ext.agent.hookserver import HookServer
from glidein_ext.errors import AgentLinkError
from glidein_ext.glidein import agentlink, fetchhook

SLOT_AD = """\
Name = "slot1@g@host"
State = "Unclaimed"
PartitionableSlot = true
Cpus = 2
Memory = 1024
Disk = 100000
TotalSlotCpus = 2
TotalSlotMemory = 1024
"""
JOB_AD = 'GlideinExtTqTask = 7\nGlideinExtTqAttempt = 1\nCmd = "/bin/true"\n'


def test_messages_are_one_versioned_json_line_with_a_cap() -> None:
    data = agentlink.encode({"op": "status"})
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    assert agentlink.decode(data.rstrip(b"\n")) == {"v": agentlink.PROTOCOL, "op": "status"}
    with pytest.raises(AgentLinkError, match="protocol"):
        agentlink.decode(b'{"v": 99, "op": "status"}')
    with pytest.raises(AgentLinkError, match="protocol"):
        agentlink.decode(b'["not", "an", "object"]')
    with pytest.raises(AgentLinkError, match="malformed"):
        agentlink.decode(b"{nope")
    with pytest.raises(AgentLinkError, match="cap"):
        agentlink.encode({"ad": "x" * agentlink.MAX_MESSAGE})
    with pytest.raises(AgentLinkError, match="cap"):
        agentlink.decode(b" " * (agentlink.MAX_MESSAGE + 1))


def test_the_link_directory_is_private_and_ours(tmp_path: Path) -> None:
    os.umask(0o022)
    path = Path(agentlink.make_link_dir(str(tmp_path)))
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    path.chmod(0o755)  # an old, wider directory is tightened when the agent takes it over
    agentlink.make_link_dir(str(tmp_path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    path.chmod(0o770)
    with pytest.raises(AgentLinkError, match="open to other users"):
        agentlink.check_dir(str(path))


def test_a_hook_follows_no_symlink_and_wants_a_socket(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    (tmp_path / ".glidein-ext").mkdir()
    (tmp_path / ".glidein-ext" / "agent").symlink_to(real)
    with pytest.raises(AgentLinkError, match="symlink"):
        agentlink.call(str(tmp_path), {"op": "status"})
    other = tmp_path / "other"
    link = Path(agentlink.make_link_dir(str(other)))
    with pytest.raises(AgentLinkError, match="is the agent running"):
        agentlink.call(str(other), {"op": "status"})
    (link / agentlink.SOCKET_NAME).write_text("not a socket")
    with pytest.raises(AgentLinkError, match="not a socket"):
        agentlink.call(str(other), {"op": "status"})


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Board]]:
    # a start dir longer than a unix socket path may be (glideinWMS's can be)
    start_dir = tmp_path / ("d" * 60) / ("e" * 60)
    start_dir.mkdir(parents=True)
    board = Board(fetch_wait=0.2)
    server = HookServer(str(start_dir), board).start()
    try:
        yield str(start_dir), board
    finally:
        server.stop()
    assert not os.path.exists(agentlink.socket_path(str(start_dir)))


def test_the_hooks_talk_to_the_agent_through_the_socket(served: tuple[str, Board]) -> None:
    start_dir, board = served
    path = agentlink.socket_path(start_dir)
    assert len(os.fsencode(path)) > agentlink.MAX_SUN_PATH  # reached through /proc/self/fd
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    assert fetchhook.fetch_work(start_dir, SLOT_AD) == ""  # no task yet: the hook prints nothing
    board.offer(Handoff((7, 1), 0, 1, 256, 100, JOB_AD))
    assert fetchhook.fetch_work(start_dir, SLOT_AD) == JOB_AD
    both = f"{JOB_AD}{fetchhook.AD_SEPARATOR}\n{SLOT_AD}"
    fetchhook.reply_fetch(start_dir, "accept", both)
    ad = {"glideinexttqtask": 7, "glideinexttqattempt": 1}
    fetchhook.task_starting(start_dir, ad, starter_pid=os.getpid())
    fetchhook.evict_claim(start_dir, both)
    fetchhook.task_exited(start_dir, {**ad, "exitcode": 0}, "evict")
    end = board.core.finish((7, 1))
    assert end is not None and end.kind.value == "evicted"
    with pytest.raises(AgentLinkError, match=r"does not run task 8\.1"):
        fetchhook.task_starting(start_dir, {"glideinexttqtask": 8, "glideinexttqattempt": 1}, 1)
    retiring = SLOT_AD + "GLIDEIN_RetireNow = true\n"
    board.offer(Handoff((9, 1), 0, 1, 256, 100, JOB_AD))
    assert fetchhook.fetch_work(start_dir, retiring) == ""  # never asked: no new job starts


def test_a_malformed_request_gets_an_error_and_the_server_lives_on(
    served: tuple[str, Board],
) -> None:
    start_dir, _ = served
    with pytest.raises(AgentLinkError, match="unknown op"):
        agentlink.call(start_dir, {"op": "format-disk"})
    with pytest.raises(AgentLinkError, match="must be an integer"):
        agentlink.call(start_dir, {"op": "reply", "task": "7", "attempt": 1, "accept": True})
    with agentlink.socket_address(agentlink.socket_path(start_dir)) as address:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(5)
        sock.connect(address)
        sock.sendall(b"garbage\n")
        answer = agentlink.decode(agentlink.read_message(sock))
        sock.close()
    assert "malformed" in answer["error"]
    assert agentlink.call(start_dir, {"op": "status"})["status"]["closed"] is False
