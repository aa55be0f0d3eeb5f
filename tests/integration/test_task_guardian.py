"""The pilot's task guardian as real processes (``agent.taskproc.TaskGuardian``): it outlives
the signals a pilot's process group gets, kills what is registered when its pipe closes, is
started again with every group when it dies, and tasks fall back to ``deathsig_start``'s way when
none can run."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from glidein_ext.agent import taskproc
from glidein_ext.agent.taskproc import TaskGuardian, guardian_command, kill_group, start_task
from tests.support.procs import running


def _sleeps(count: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen(["sleep", "119"], start_new_session=True) for _ in range(count)]


def _gone_soon(process: subprocess.Popen[bytes]) -> bool:
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return False
    return True


def _ignored(pid: int) -> set[int]:
    """The signals ``pid`` ignores (its SigIgn mask in /proc)."""
    with open(f"/proc/{pid}/status") as status:
        mask = next(int(line.split()[1], 16) for line in status if line.startswith("SigIgn:"))
    return {number for number in range(1, 65) if mask & (1 << (number - 1))}


@pytest.fixture
def guardian() -> Iterator[TaskGuardian]:
    made = TaskGuardian(*guardian_command())
    yield made
    made.close()


@pytest.fixture
def sleeps() -> Iterator[list[subprocess.Popen[bytes]]]:
    made = _sleeps(3)
    yield made
    for process in made:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_closing_the_pipe_kills_the_registered_groups_only(
    guardian: TaskGuardian, sleeps: list[subprocess.Popen[bytes]]
) -> None:
    watched, forgotten, never = sleeps
    assert guardian.available()
    assert guardian.watch(watched.pid) and guardian.watch(forgotten.pid)
    guardian.forget(forgotten.pid)
    guardian.close()
    assert _gone_soon(watched) and watched.returncode == -signal.SIGKILL
    assert forgotten.poll() is None and never.poll() is None


def test_signals_to_the_pilots_group_leave_the_guardian_watching(
    guardian: TaskGuardian, sleeps: list[subprocess.Popen[bytes]]
) -> None:
    assert guardian.watch(sleeps[0].pid)
    pid = guardian.pid
    assert pid is not None
    ignoring = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    deadline = time.monotonic() + 30
    while not ignoring <= _ignored(pid):  # past its start-up: its dispositions are set
        assert time.monotonic() < deadline, "the guardian never ignored the signals"
        time.sleep(0.02)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        os.kill(pid, sig)
    time.sleep(0.3)
    assert running(pid) and sleeps[0].poll() is None
    guardian.close()
    assert _gone_soon(sleeps[0])
    assert not running(pid)


def test_a_guardian_that_dies_is_started_again_with_every_group(
    guardian: TaskGuardian, sleeps: list[subprocess.Popen[bytes]]
) -> None:
    first, second, _ = sleeps
    assert guardian.watch(first.pid)
    old = guardian.pid
    assert old is not None
    os.kill(old, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while running(old):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert guardian.watch(second.pid)  # the write breaks, a new guardian takes both groups
    assert guardian.pid not in (None, old)
    guardian.close()
    assert _gone_soon(first) and _gone_soon(second)


def test_no_guardian_past_its_starts(sleeps: list[subprocess.Popen[bytes]]) -> None:
    broken = TaskGuardian(["/nonexistent/python"], {})
    assert not broken.available()
    assert not broken.watch(sleeps[0].pid)
    assert broken.pid is None


def test_without_a_guardian_a_task_starts_the_task_start_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ways: list[list[str]] = []
    real = taskproc.deathsig_start

    def recorded(argv: list[str], cwd: Path, env: dict[str, str]) -> object:
        ways.append(list(argv))
        return real(argv, cwd, env)

    monkeypatch.setattr(taskproc, "process_guardian", lambda: TaskGuardian(["/nonexistent"], {}))
    monkeypatch.setattr(taskproc, "deathsig_start", recorded)
    with open(tmp_path / "task.log", "wb") as log:
        process = start_task(["sh", "-c", "echo started"], tmp_path, dict(os.environ), log)
    try:
        assert process.wait(timeout=10) == 0
    finally:
        kill_group(process)
    assert ways == [["sh", "-c", "echo started"]]
    assert (tmp_path / "task.log").read_text() == "started\n"


def test_a_task_started_with_the_guardian_is_forgotten_when_its_group_is_killed(
    tmp_path: Path,
) -> None:
    guardian = taskproc.process_guardian()
    assert guardian is not None
    with open(tmp_path / "task.log", "wb") as log:
        process = start_task(["sleep", "118"], tmp_path, dict(os.environ), log)
    assert process.pid in guardian.groups
    kill_group(process, grace=1)
    assert process.returncode == -signal.SIGTERM
    assert process.pid not in guardian.groups
