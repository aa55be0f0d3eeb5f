"""What `pilot run` says at its default level, against a real `tq serve`: its registration, a
reconnection once the Task Queue is back, and on Ctrl-C the task it gives back (requeued), then
a clean exit."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from glidein_ext.testbed.tq_server import TqServer, tq_env


def _pilot(url: str, workdir: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    """A pilot as a user starts it: no -v."""
    log_path = workdir.with_suffix(".log")
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "glidein_ext", "pilot", "run", "--tq", url),
                *("--site", "T0", "--workdir", str(workdir), "--min-free-mb", "1"),
                *("--poll", "0.3", *args),
            ],
            env=tq_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    return process, log_path


def test_ctrl_c_gives_the_task_back_and_says_which(
    tq_server: Callable[..., TqServer], tmp_path: Path, wait_until: Callable[..., Any]
) -> None:
    server = tq_server()
    client = server.operator()
    client.submit({"name": "w", "tasks": [{"name": "long", "command": "sleep 600"}]})
    process, log_path = _pilot(server.url, tmp_path / "p1")
    try:
        wait_until(
            lambda: client.status().workflows[0].tasks["running"] == 1, 60, "the task to run"
        )
        log = log_path.read_text()
        assert "INFO registered as pilot 1 at" in log, log
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0, log_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    log = log_path.read_text()
    assert "stopped: task 1 (long) given back to the Task Queue" in log
    assert "Aborted" not in log and "Traceback" not in log
    assert client.status().workflows[0].tasks["queued"] == 1


def test_a_reconnection_is_said(
    tq_server: Callable[..., TqServer], tmp_path: Path, wait_until: Callable[..., Any]
) -> None:
    server = tq_server(heartbeat_interval="1")
    process, log_path = _pilot(server.url, tmp_path / "p1", "--retry-for", "120")
    try:
        wait_until(lambda: "registered as pilot" in log_path.read_text(), 60, "registration")
        server.stop()
        wait_until(lambda: "failed (cannot reach" in log_path.read_text(), 60, "a failure")
        server.start()
        wait_until(lambda: "INFO reconnected to the Task Queue" in log_path.read_text(), 60, "it")
    finally:
        process.terminate()
        process.wait(timeout=60)
