"""Run one task as a subprocess in its own directory (seed 001 IV: the real job inside the pilot).

The command is split into words (no shell); the task sees ``TQ_INPUTS`` and ``TQ_OUTPUTS`` (space
separated paths, inputs from the cache, outputs to write in its directory), ``TQ_TASK_ID`` and
``TQ_TASK_NAME``.  It is killed at its MaxRunTime or when the pilot is told to stop.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glidein_ext.agent import files
from glidein_ext.errors import TaskQueueError


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    outputs: list[str]  # declared outputs it produced
    report: str


def run_task(
    task: dict[str, Any],
    workdir: Path,
    cache: Path,
    neighbours: Iterable[Path],
    se_dir: Path | None,
    stop: threading.Event,
) -> Outcome:
    """Stage in, run, stage out; never raises for the task's own failures."""
    task_dir = workdir / "tasks" / f"{task['task_id']}.{task['attempt']}"
    shutil.rmtree(task_dir, ignore_errors=True)
    task_dir.mkdir(parents=True)
    sources: list[str] = []
    try:
        inputs = []
        for lfn in task["inputs"]:
            path, origin = files.fetch(lfn, cache, list(neighbours), se_dir)
            inputs.append(str(path))
            sources.append(f"{lfn}:{origin}")
        outputs = {lfn: files.lfn_path(task_dir / "out", lfn) for lfn in task["outputs"]}
        for path in outputs.values():
            path.parent.mkdir(parents=True, exist_ok=True)
    except TaskQueueError as exc:
        return Outcome(97, [], f"stage-in failed: {exc}")
    env = {
        **os.environ,
        "TQ_INPUTS": " ".join(inputs),
        "TQ_OUTPUTS": " ".join(str(p) for p in outputs.values()),
        "TQ_TASK_ID": str(task["task_id"]),
        "TQ_TASK_NAME": str(task["name"]),
    }
    log_path = task_dir / "task.log"
    try:
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                shlex.split(task["command"]),
                cwd=task_dir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
    except (OSError, ValueError) as exc:
        return Outcome(127, [], f"cannot start: {exc}")
    code = _wait(process, float(task["max_runtime"]), stop)
    produced = []
    for lfn, path in outputs.items():
        if path.is_file():
            files.keep(path, lfn, cache, se_dir)
            produced.append(lfn)
    tail = log_path.read_bytes()[-2000:].decode(errors="replace")
    return Outcome(code, produced, f"inputs {' '.join(sources)}\n{tail}")


def _wait(process: subprocess.Popen[bytes], limit: float, stop: threading.Event) -> int:
    waited = 0.0
    while True:
        try:
            return process.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            waited += 0.2
        if stop.is_set() or waited > limit:
            _kill(process)
            return process.wait()


def _kill(process: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue
