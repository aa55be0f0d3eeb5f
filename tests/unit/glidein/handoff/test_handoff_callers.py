"""The hook link binds each call to its task and its caller (glidein.handoff.server, .caller).

In a glidein a payload runs as the agent's user, so the socket's uid check lets it in.  These
tests build the real ancestry: a ``condor_startd`` and ``condor_starter`` (copies of /bin/sh under
those names) run the hooks as their children, and the task's "payload" is a child of its starter,
as HTCondor has it; the agent reads /proc.  Real processes and sockets; no HTCondor."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from glidein_ext.errors import AgentLinkError
from glidein_ext.glidein.handoff import link
from glidein_ext.glidein.handoff.board import Board
from glidein_ext.glidein.handoff.caller import CallerGate, Proc, ProcFs
from glidein_ext.glidein.handoff.core import HandedTask, SlotView
from glidein_ext.glidein.handoff.server import MAX_CONNECTIONS, STARTER_CONNECTIONS, HookServer

ROOT = Path(__file__).resolve().parents[4]
pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="Linux /proc")

# One hook call: python HOOK START_DIR OP [TASK SECRET]; prints the answer or "refused: ...".
HOOK = """\
import json, sys
from glidein_ext.errors import AgentLinkError
from glidein_ext.glidein.handoff import link
start, op, *rest = sys.argv[1:]
request = {"op": op}
if op == "fetch":
    request["slot"] = {"name": "s", "cpus": 8, "memory": 8000, "disk": 10**7,
                       "total_cpus": 8, "total_memory": 8000, "partitionable": True}
if rest:
    request.update(task=int(rest[0]), attempt=1, secret=rest[1], accept=True, reason="exit",
                   exit_code=0, starter=0)
try:
    print(json.dumps(link.call(start, request)))
except AgentLinkError as exc:
    print("refused: " + str(exc))
"""


@pytest.fixture
def glidein(tmp_path: Path) -> Iterator[tuple[Path, Board, Path]]:
    """A start dir served by a real HookServer (real /proc gate), tasks 1 and 2 on its board,
    and a bin directory with ``condor_startd`` and ``condor_starter``."""
    start = tmp_path / "start"
    start.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("condor_startd", "condor_starter"):
        shutil.copy2("/bin/sh", bindir / name)
    (tmp_path / "hook.py").write_text(HOOK)
    board = Board(fetch_wait=0.1)
    board.core.take(SlotView("s", 8, 8000, 10**7, 8, 8000), 0)
    for task_id in (1, 2):
        ad: dict[str, object] = {"ClusterId": task_id}
        board.offer(HandedTask((task_id, 1), 0, 1, 100, 100, ad, secret=f"s{task_id}"))
    server = HookServer(str(start), board).start()
    try:
        yield start, board, bindir
    finally:
        server.stop()


def run_as_startd(tmp_path: Path, bindir: Path, script: str) -> dict[str, str]:
    """Run ``script`` (sh) as the glidein's condor_startd; its lines ``NAME: hook OP ...`` run
    the hook as its child (or, inside ``$STARTER -c '...'``, a starter's child); the answers."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),
        "HOOK": f"{sys.executable} {tmp_path / 'hook.py'} {tmp_path / 'start'}",
        "STARTER": str(bindir / "condor_starter"),
        "OUT": str(out),
        "HOLDER": f"{sys.executable} {tmp_path / 'hold.py'} {tmp_path / 'start'}",
        "EXIT": f"{sys.executable} {tmp_path / 'exit.py'} {tmp_path / 'start'}",
    }
    subprocess.run([str(bindir / "condor_startd"), "-c", script], env=env, check=True, timeout=120)
    return {path.name: path.read_text().strip() for path in out.iterdir()}


def task_1_runs(in_its_starter: str, then: str = "") -> str:
    """A startd script: the startd fetches task 1 and replies, task 1's starter prepares it and
    runs the sh lines ``in_its_starter`` (its payload's and its own hooks), then the startd runs
    ``then``.  Each hook's answer goes to $OUT: fetch, reply1, prepare1 and the scripts' own."""
    return f"""
        $HOOK fetch > $OUT/fetch; true
        $HOOK reply 1 s1 > $OUT/reply1; true
        $STARTER -c '
            $HOOK prepare 1 s1 > $OUT/prepare1; true
{in_its_starter}
        '; true
{then}
        """


def test_a_payload_cannot_touch_another_task(glidein: tuple[Path, Board, Path]) -> None:
    start, board, bindir = glidein
    tmp = start.parent
    answers = run_as_startd(
        tmp,
        bindir,
        task_1_runs(
            """
            # task 1 runs: these are its payload, a child of its starter, knowing task 2 secret
            $HOOK exit 2 s2 > $OUT/payload_exit2; true
            $HOOK prepare 2 s2 > $OUT/payload_prepare2; true
            $HOOK fetch > $OUT/payload_fetch; true
            $HOOK evict 2 s2 > $OUT/payload_evict2; true
            $HOOK reply 2 s2 > $OUT/payload_reply2; true
            $HOOK exit 1 s2 > $OUT/payload_wrong_secret; true
            $HOOK exit 1 s1 > $OUT/exit1; true
            """,
            then="""
            $HOOK fetch > $OUT/fetch2; true
            $STARTER -c '$HOOK prepare 2 s2 > $OUT/prepare2; $HOOK exit 2 s2 > $OUT/exit2; true'
            """,
        ),
    )
    assert json.loads(answers["fetch"])["ad"] == {"ClusterId": 1}  # the startd's own fetch
    assert json.loads(answers["prepare1"])["ok"] is True
    # task 1's payload: it may not end, take, evict or start task 2, nor fetch
    assert answers["payload_exit2"].startswith("refused:"), answers
    assert json.loads(answers["payload_prepare2"])["ok"] is False  # its starter runs task 1
    assert "only the glidein's condor_startd" in answers["payload_fetch"]
    assert "only the glidein's condor_startd" in answers["payload_evict2"]
    assert "only the glidein's condor_startd" in answers["payload_reply2"]
    assert "with that secret" in answers["payload_wrong_secret"]
    # the tasks' own hooks still work: both ran and ended as their starters said
    assert json.loads(answers["exit1"]) == {"v": link.PROTOCOL, "ok": True}
    assert json.loads(answers["prepare2"])["ok"] is True
    assert json.loads(answers["exit2"])["ok"] is True
    ends = [board.core.finish((task_id, 1)) for task_id in (1, 2)]
    assert [e.kind.value if e else None for e in ends] == ["exited", "exited"]


def test_a_process_outside_htcondor_gets_counts_only(glidein: tuple[Path, Board, Path]) -> None:
    start, _, _ = glidein
    status = link.call(str(start), {"op": "status"})["status"]
    assert status["tasks"] == {"offered": 2}  # how many, never which
    with pytest.raises(AgentLinkError, match="only the glidein's condor_startd"):
        link.call(str(start), {"op": "fetch", "slot": {}})
    with pytest.raises(AgentLinkError, match="only a condor_starter"):
        link.call(str(start), {"op": "exit", "task": 1, "attempt": 1, "secret": "s1"})


def test_the_proc_table_reads_this_process() -> None:
    me = ProcFs().get(os.getpid())
    assert me is not None and me.ppid == os.getppid() and me.ticks > 0
    assert me.name == os.path.basename(os.path.realpath(sys.executable))
    assert ProcFs().get(-1) is None and ProcFs().get(2**22 + 12345) is None


def test_a_restarted_startd_of_the_same_master_takes_over() -> None:
    procs = {
        10: Proc(10, 1, "condor_master", 1),
        11: Proc(11, 10, "condor_startd", 5),
        12: Proc(12, 11, "python3", 6),
        21: Proc(21, 12, "condor_startd", 7),  # a payload's own "condor_startd"
        22: Proc(22, 21, "python3", 8),
    }

    class Table:
        def get(self, pid: int) -> Proc | None:
            return procs.get(pid)

    gate = CallerGate(Table())
    gate.check_startd(12)  # pinned: 11
    with pytest.raises(AgentLinkError):
        gate.check_startd(22)  # another process named condor_startd
    del procs[11]  # the startd ends; condor_master starts another
    procs[13] = Proc(13, 10, "condor_startd", 9)
    procs[14] = Proc(14, 13, "python3", 10)
    with pytest.raises(AgentLinkError):
        gate.check_startd(22)  # not condor_master's child
    gate.check_startd(14)
    assert gate.startd is not None and gate.startd.pid == 13


def test_a_connection_has_a_total_deadline_and_connections_are_capped(tmp_path: Path) -> None:
    """Many connections that trickle a byte at a time neither outlive the deadline nor pile
    up threads: at most max_connections are served, the others are closed at once."""
    server = HookServer(str(tmp_path), Board(), deadline=1.0, max_connections=4).start()
    before = threading.active_count()
    socks = []
    try:
        with link.socket_address(link.socket_path(str(tmp_path))) as address:
            for _ in range(40):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                socks.append(sock)
                for _ in range(500):  # the listen backlog is short: the server drains it
                    try:
                        sock.connect(address)
                        break
                    except BlockingIOError:
                        time.sleep(0.01)
        most = 0
        closed: set[int] = set()
        until = time.monotonic() + 20
        while len(closed) < len(socks) and time.monotonic() < until:
            most = max(most, threading.active_count() - before)
            for i, sock in enumerate(socks):
                if i in closed:
                    continue
                try:
                    sock.settimeout(0.01)
                    sock.send(b" ")  # one byte, never a newline
                    sock.recv(4096)  # an answer (an error), or b"" when closed: either way, done
                    closed.add(i)
                except socket.timeout:
                    pass  # still open, still trickling
                except OSError:
                    closed.add(i)  # the server closed it
            time.sleep(0.2)
        assert len(closed) == len(socks)  # every trickling connection ended
        assert most <= 4
        assert server.turned_away > 0
    finally:
        for sock in socks:
            sock.close()
        server.stop()


def _hold(start: Path, count: int) -> list[socket.socket]:
    """``count`` connections to the hook link that send nothing (held until closed)."""
    held = []
    with link.socket_address(link.socket_path(str(start))) as address:
        for _ in range(count):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(address)
            held.append(sock)
    time.sleep(0.3)  # the server has taken (or turned away) each of them
    return held


def test_a_payload_holding_the_link_keeps_no_hook_of_htcondor_out(
    glidein: tuple[Path, Board, Path],
) -> None:
    """Every connection a process outside HTCondor's hooks may hold is held (and more), and
    task 1's payload holds its own starter's: the startd's FETCH_WORK and REPLY_FETCH, and task
    2's PREPARE_JOB and JOB_EXIT from another starter, are still answered."""
    start, board, bindir = glidein
    tmp = start.parent
    held = _hold(start, MAX_CONNECTIONS + 8)  # a payload's descendant: no hook's ancestry
    (tmp / "hold.py").write_text(HOLD)
    try:
        answers = run_as_startd(
            tmp,
            bindir,
            task_1_runs(
                """
                $HOLDER 8 3 &
                sleep 1
                """,
                then="""
                $HOOK fetch > $OUT/fetch2; true
                $HOOK reply 2 s2 > $OUT/reply2; true
                $STARTER -c '$HOOK prepare 2 s2 > $OUT/prepare2; $HOOK exit 2 s2 > $OUT/exit2; true'
                wait
                """,
            ),
        )
    finally:
        for sock in held:
            sock.close()
    assert json.loads(answers["fetch"])["ad"] == {"ClusterId": 1}, answers
    assert json.loads(answers["prepare1"])["ok"] is True, answers
    assert json.loads(answers["fetch2"])["ad"] == {"ClusterId": 2}, answers
    assert json.loads(answers["prepare2"])["ok"] is True, answers
    assert json.loads(answers["exit2"])["ok"] is True, answers
    end = board.core.finish((2, 1))
    assert end is not None and end.kind.value == "exited"


# A payload of a starter: python HOLD START COUNT SECONDS holds COUNT connections that long.
HOLD = """\
import socket, sys, time
from glidein_ext.glidein.handoff import link
start, count, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
held = []
with link.socket_address(link.socket_path(start)) as address:
    for _ in range(count):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(address)
        held.append(sock)
time.sleep(seconds)
"""

# JOB_EXIT as the hook sends it: python EXIT START TASK SECRET
EXIT = """\
import sys
from glidein_ext.glidein.handoff import hooks
from glidein_ext.glidein.jobad import parse_job_ad
start, task, secret = sys.argv[1:]
ad = parse_job_ad(
    f'{hooks.TASK_ATTR} = {task}\\n{hooks.ATTEMPT_ATTR} = 1\\n{hooks.SECRET_ATTR} = "{secret}"\\n'
    'ExitCode = 0\\n'
)
hooks.task_exited(start, ad, "exit")
print("taken")
"""


def test_job_exit_is_tried_again_until_the_agent_takes_it(
    glidein: tuple[Path, Board, Path],
) -> None:
    """Task 1's payload holds every connection of its starter for 2 s while JOB_EXIT comes: it
    is turned away, tried again, and taken: the task ends as it exited, not evicted."""
    start, board, bindir = glidein
    tmp = start.parent
    (tmp / "hold.py").write_text(HOLD)
    (tmp / "exit.py").write_text(EXIT)
    answers = run_as_startd(
        tmp,
        bindir,
        task_1_runs(
            f"""
            $HOLDER {STARTER_CONNECTIONS} 2 &
            sleep 0.5
            $EXIT 1 s1 > $OUT/exit1 2>&1; true
            wait
            """
        ),
    )
    assert json.loads(answers["prepare1"])["ok"] is True, answers
    assert answers["exit1"] == "taken", answers
    end = board.core.finish((1, 1))
    assert end is not None and end.kind.value == "exited", end
