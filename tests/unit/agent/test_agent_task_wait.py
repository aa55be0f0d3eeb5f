"""A task's end as the runner waits for it (``runner._wait``): its exit code when it ends, killed
with its group past its time limit or when the pilot stops; the same without a pidfd."""

from __future__ import annotations

import os
import subprocess
import threading

import pytest

from glidein_ext.agent import runner


def _start(*argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL)


@pytest.fixture(params=["pidfd", "polled"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "polled":
        monkeypatch.setattr(runner, "_pidfd", lambda pid: None)
    elif getattr(os, "pidfd_open", None) is None:
        pytest.skip("this Python has no os.pidfd_open")
    return str(request.param)


def test_the_exit_code_of_a_task_that_ends(way: str) -> None:
    process = _start("sh", "-c", "sleep 0.1; exit 3")
    assert runner._wait(process, 60.0, threading.Event()) == 3
    assert process.returncode == 3


def test_a_task_past_its_limit_is_killed(way: str) -> None:
    process = _start("sleep", "60")
    code = runner._wait(process, 0.3, threading.Event())
    assert code < 0  # ended by a signal (SIGTERM from kill_group), not by itself
    assert process.poll() is not None


def test_a_task_is_killed_when_the_pilot_stops(way: str) -> None:
    stop = threading.Event()
    timer = threading.Timer(0.3, stop.set)
    timer.start()
    process = _start("sleep", "60")
    try:
        code = runner._wait(process, 3600.0, stop)
    finally:
        timer.cancel()
    assert code < 0 and stop.is_set()


def test_no_descriptor_is_left_open(way: str) -> None:
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        runner._wait(_start("true"), 60.0, threading.Event())
    assert len(os.listdir("/proc/self/fd")) == before
