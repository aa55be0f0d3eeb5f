"""The link between a glidein's hooks and its agent: one JSON line each way over a unix socket in
a private directory of the start dir (glidein.handoff.link), served by handoff.server, used by the
hooks (glidein.handoff.hooks).  Real sockets in tmp_path; no HTCondor."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from glidein_ext.errors import AgentLinkError
from glidein_ext.glidein.handoff import hooks as fetchhook
from glidein_ext.glidein.handoff import link as agentlink
from glidein_ext.glidein.handoff.board import Board
from glidein_ext.glidein.handoff.caller import STARTD, STARTER, CallerGate, Proc
from glidein_ext.glidein.handoff.core import HandedTask
from glidein_ext.glidein.handoff.server import HookServer
from glidein_ext.glidein.jobad import Literal

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
SECRET = "ab" * 16
JOB_AD = f'GlideinExtTqTask = 7\nGlideinExtTqAttempt = 1\nGlideinExtTqSecret = "{SECRET}"\n'
STARTD_PID, STARTER_PID = 10_001, 10_002


class Table:
    """This test process as a hook: the child of a condor_startd, or of a condor_starter of it
    (``as_starter``).  The real ancestry is tested in test_handoff_callers.py."""

    def __init__(self) -> None:
        self.as_starter = False

    def get(self, pid: int) -> Proc | None:
        if pid == os.getpid():
            return Proc(pid, STARTER_PID if self.as_starter else STARTD_PID, "python3", 1)
        if pid == STARTER_PID:
            return Proc(pid, STARTD_PID, STARTER, 2)
        if pid == STARTD_PID:
            return Proc(pid, 1, STARTD, 1)
        return None


def job_ad(task_id: int) -> dict[str, object]:
    from glidein_ext.glidein.handoff import taskad

    ad: dict[str, object] = dict.fromkeys(taskad.JOB_ATTRIBUTES, 1)
    return {**ad, "ClusterId": task_id}


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
def served(tmp_path: Path) -> Iterator[tuple[str, Board, Table]]:
    # a start dir longer than a unix socket path may be (glideinWMS's can be)
    start_dir = tmp_path / ("d" * 60) / ("e" * 60)
    start_dir.mkdir(parents=True)
    board = Board(fetch_wait=0.2)
    table = Table()
    server = HookServer(str(start_dir), board, CallerGate(table)).start()
    try:
        yield str(start_dir), board, table
    finally:
        server.stop()
    assert not os.path.exists(agentlink.socket_path(str(start_dir)))


def test_the_hooks_talk_to_the_agent_through_the_socket(
    served: tuple[str, Board, Table],
) -> None:
    start_dir, board, table = served
    path = agentlink.socket_path(start_dir)
    assert len(os.fsencode(path)) > agentlink.MAX_SUN_PATH  # reached through /proc/self/fd
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    assert fetchhook.fetch_work(start_dir, SLOT_AD) == ""  # no task yet: the hook prints nothing
    board.offer(HandedTask((7, 1), 0, 1, 256, 100, job_ad(7), secret=SECRET))
    printed = fetchhook.fetch_work(start_dir, SLOT_AD)
    assert printed.startswith("MyType = 1\n") and "\nClusterId = 7\n" in printed
    both = f"{JOB_AD}{fetchhook.AD_SEPARATOR}\n{SLOT_AD}"
    fetchhook.reply_fetch(start_dir, "accept", both)
    ad: dict[str, Literal] = {
        "glideinexttqtask": 7,
        "glideinexttqattempt": 1,
        "glideinexttqsecret": SECRET,
    }
    with pytest.raises(AgentLinkError, match="only a condor_starter"):
        fetchhook.task_starting(start_dir, ad, starter_pid=os.getpid())  # the startd's child
    table.as_starter = True
    fetchhook.task_starting(start_dir, ad, starter_pid=os.getppid())
    assert board.core.starter_of((7, 1)) == STARTER_PID  # its real parent, not what it said
    with pytest.raises(AgentLinkError, match="only the glidein's condor_startd"):
        fetchhook.evict_claim(start_dir, both)  # a starter's child is not the startd
    table.as_starter = False
    fetchhook.evict_claim(start_dir, both)
    table.as_starter = True
    fetchhook.task_exited(start_dir, {**ad, "exitcode": 0}, "evict")
    end = board.core.finish((7, 1))
    assert end is not None and end.kind.value == "evicted"
    with pytest.raises(AgentLinkError, match=r"no task 8\.1"):
        fetchhook.task_starting(start_dir, {**ad, "glideinexttqtask": 8}, 1)
    table.as_starter = False
    retiring = SLOT_AD + "GLIDEIN_RetireNow = true\n"
    board.offer(HandedTask((9, 1), 0, 1, 256, 100, job_ad(9), secret=SECRET))
    assert fetchhook.fetch_work(start_dir, retiring) == ""  # never asked: no new job starts


def test_a_malformed_request_gets_an_error_and_the_server_lives_on(
    served: tuple[str, Board, Table],
) -> None:
    start_dir, _, _ = served
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
