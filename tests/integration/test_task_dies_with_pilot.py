"""A task started by ``agent.taskproc.task_start`` dies when its starting process is SIGKILLed,
both ways: under ``setpriv --pdeathsig`` (no ``preexec_fn``) and with the ``preexec_fn``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from glidein_ext.agent.taskproc import setpriv_pdeathsig, task_start
from tests.support.procs import running

# A stand-in pilot: starts `sleep 120` the way the runner does, says its pid, then waits.
PILOT = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from pathlib import Path
    from glidein_ext.agent import taskproc
    if sys.argv[2] == "preexec":
        taskproc.setpriv_pdeathsig = lambda: None
    argv, preexec = taskproc.task_start(["sleep", "120"], Path.cwd(), os.environ)
    print(argv[0], preexec is None, flush=True)
    task = subprocess.Popen(argv, start_new_session=True, preexec_fn=preexec)
    Path(sys.argv[1]).write_text(str(task.pid))
    time.sleep(300)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("way", ["setpriv", "preexec"])
def test_task_dies_with_a_sigkilled_pilot(way: str, tmp_path: Path) -> None:
    if way == "setpriv" and setpriv_pdeathsig() is None:
        pytest.skip("no setpriv with --pdeathsig here")
    pid_file = tmp_path / "task.pid"
    pilot = subprocess.Popen(
        [sys.executable, "-c", PILOT, str(pid_file), way],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert pilot.stdout is not None
        program, no_preexec = pilot.stdout.readline().split()
        assert (program.endswith("setpriv"), no_preexec) == (
            (True, "True") if way == "setpriv" else (False, "False")
        )
        deadline = time.monotonic() + 30
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the task did not start"
            time.sleep(0.05)
        task = int(pid_file.read_text())
        assert running(task)
        pilot.send_signal(signal.SIGKILL)
        pilot.wait(timeout=10)
        deadline = time.monotonic() + 10
        while running(task):
            assert time.monotonic() < deadline, f"task {task} outlived its pilot"
            time.sleep(0.05)
    finally:
        if pilot.poll() is None:
            pilot.kill()
            pilot.wait()
        if pid_file.exists() and pid_file.read_text() and running(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_program_not_found_fails_in_popen_as_before(tmp_path: Path) -> None:
    argv, preexec = task_start(["no-such-command-here", "x"], tmp_path, {"PATH": "/usr/bin"})
    assert argv == ["no-such-command-here", "x"]
    with pytest.raises(FileNotFoundError):
        subprocess.Popen(argv, cwd=tmp_path, env={"PATH": "/usr/bin"}, preexec_fn=preexec)  # noqa: PLW1509


def test_a_relative_script_is_found_from_the_task_directory(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\necho ok\n")
    script.chmod(0o755)
    argv, preexec = task_start(["./run.sh"], tmp_path, {"PATH": "/usr/bin:/bin"})
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
