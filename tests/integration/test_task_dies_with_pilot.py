"""A task dies when the pilot that started it is SIGKILLed, every way ``agent.taskproc`` has:
watched by the pilot's task guardian (``start_task``; with what the task started in its group),
and, where no guardian runs, under ``setpriv --pdeathsig`` (no ``preexec_fn``) and with the
``preexec_fn`` (``deathsig_start``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from glidein_ext.agent.taskproc import deathsig_start, setpriv_pdeathsig
from tests.support.procs import running

# A stand-in pilot: starts `sleep 120` the parent-death-signal way (deathsig_start), says its
# pid, then waits.
PILOT = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from pathlib import Path
    from glidein_ext.agent import taskproc
    if sys.argv[2] == "preexec":
        taskproc.setpriv_pdeathsig = lambda: None
    argv, preexec = taskproc.deathsig_start(["sleep", "120"], Path.cwd(), os.environ)
    print(argv[0], preexec is None, flush=True)
    task = subprocess.Popen(argv, start_new_session=True, preexec_fn=preexec)
    Path(sys.argv[1]).write_text(str(task.pid))
    time.sleep(300)
    """
)

# A stand-in pilot that starts its task as the runner does (start_task): a shell that starts a
# `sleep` of its own in the background; it says its guardian's pid, then waits.
GUARDED_PILOT = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from glidein_ext.agent import taskproc
    with open("task.log", "wb") as log:
        task = taskproc.start_task(
            ["sh", "-c", "sleep 121 & echo $! > child.pid; wait"], Path.cwd(), os.environ, log
        )
    print(taskproc.process_guardian().pid, flush=True)
    Path(sys.argv[1]).write_text(str(task.pid))
    time.sleep(300)
    """
)


@contextlib.contextmanager
def _stand_in(script: str, *args: str, cwd: Path) -> Iterator[subprocess.Popen[str]]:
    """A stand-in pilot running ``script``; killed and its output closed on the way out."""
    pilot = subprocess.Popen(
        [sys.executable, "-c", script, *args], cwd=cwd, stdout=subprocess.PIPE, text=True
    )
    try:
        yield pilot
    finally:
        if pilot.poll() is None:
            pilot.kill()
            pilot.wait()
        if pilot.stdout is not None:
            pilot.stdout.close()


def _wait_for_pid(path: Path) -> int:
    deadline = time.monotonic() + 30
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline, f"no pid in {path.name}"
        time.sleep(0.05)
    return int(path.read_text())


def _wait_gone(pid: int, what: str) -> None:
    deadline = time.monotonic() + 10
    while running(pid):
        assert time.monotonic() < deadline, f"{what} {pid} outlived its pilot"
        time.sleep(0.05)


def test_a_guarded_task_and_its_children_die_with_a_sigkilled_pilot(tmp_path: Path) -> None:
    pids: list[int] = []
    try:
        with _stand_in(GUARDED_PILOT, str(tmp_path / "task.pid"), cwd=tmp_path) as pilot:
            assert pilot.stdout is not None
            guardian = int(pilot.stdout.readline())
            task = _wait_for_pid(tmp_path / "task.pid")
            child = _wait_for_pid(tmp_path / "child.pid")
            pids = [task, child, guardian]
            assert all(running(pid) for pid in pids)
            assert "sleep 121" in Path(f"/proc/{child}/cmdline").read_text().replace("\0", " ")
            pilot.send_signal(signal.SIGKILL)
            pilot.wait(timeout=10)
            _wait_gone(task, "task")
            _wait_gone(child, "the task's own child")
            _wait_gone(guardian, "the guardian")
    finally:
        for pid in pids:  # left by a failed check above
            if running(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("way", ["setpriv", "preexec"])
def test_task_dies_with_a_sigkilled_pilot(way: str, tmp_path: Path) -> None:
    if way == "setpriv" and setpriv_pdeathsig() is None:
        pytest.skip("no setpriv with --pdeathsig here")
    pid_file = tmp_path / "task.pid"
    try:
        with _stand_in(PILOT, str(pid_file), way, cwd=tmp_path) as pilot:
            assert pilot.stdout is not None
            program, no_preexec = pilot.stdout.readline().split()
            assert (program.endswith("setpriv"), no_preexec) == (
                (True, "True") if way == "setpriv" else (False, "False")
            )
            task = _wait_for_pid(pid_file)
            assert running(task)
            pilot.send_signal(signal.SIGKILL)
            pilot.wait(timeout=10)
            _wait_gone(task, "task")
    finally:
        if pid_file.exists() and pid_file.read_text() and running(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_program_not_found_fails_in_popen_as_before(tmp_path: Path) -> None:
    argv, preexec = deathsig_start(["no-such-command-here", "x"], tmp_path, {"PATH": "/usr/bin"})
    assert argv == ["no-such-command-here", "x"]
    with pytest.raises(FileNotFoundError):
        subprocess.Popen(argv, cwd=tmp_path, env={"PATH": "/usr/bin"}, preexec_fn=preexec)  # noqa: PLW1509


def test_a_relative_script_is_found_from_the_task_directory(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\necho ok\n")
    script.chmod(0o755)
    argv, preexec = deathsig_start(["./run.sh"], tmp_path, {"PATH": "/usr/bin:/bin"})
    assert argv[-1] == "./run.sh"
    out = subprocess.run(
        argv,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        preexec_fn=preexec,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == "ok\n"
