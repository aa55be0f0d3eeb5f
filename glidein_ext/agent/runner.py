"""Run one task as a subprocess in its own directory (Hasham 2011 §IV: the real job inside the
pilot).

The command is split into words (no shell); the task sees ``TQ_INPUTS`` and ``TQ_OUTPUTS`` (space
separated paths, inputs from the cache, outputs to write in its directory), ``TQ_TASK_ID`` and
``TQ_TASK_NAME``.  It is killed at its MaxRunTime or when the pilot is told to stop, and its
process group on every way out of ``run_task``; it dies with the pilot (``taskproc``).  Inputs stay
pinned in the pilot's cache while it runs; a successful task's outputs go into the cache, then to
the SE.

A task's own fault fails the task, never the pilot: an LFN that breaks the TQ's rule
(``tq.client.limits.lfn_problem``), an output directory that cannot be made, a command that cannot
start are answered as a failed attempt (exit codes below), which the TQ counts against
``max_retries``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import shlex
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from glidein_ext.agent import files
from glidein_ext.agent.pilot_cache import PilotCache
from glidein_ext.agent.taskproc import kill_group, start_task
from glidein_ext.errors import CacheError, TaskQueueError, TransferError
from glidein_ext.tq.client.limits import lfn_problem
from glidein_ext.tq.client.protocol import TaskAssignment

log = logging.getLogger("glidein_ext.agent")

# Exit codes of attempts that failed before or around the command (the command's own otherwise).
AGENT_ERROR = 95  # the agent failed running it (a bug): reported, the pilot goes on
REFUSED = 96  # the task's LFNs break the rule: refused before anything is done
STAGE_IN_FAILED = 97
STAGE_OUT_FAILED = 98
CANNOT_START = 127


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    outputs: list[str]  # declared outputs it produced
    report: str


@dataclass
class Staged:
    """A task ready to run: its directory, its inputs (pinned in the cache while it runs) and
    where it must write its outputs."""

    task: TaskAssignment
    task_dir: Path
    inputs: list[str]  # paths, in the task's order
    outputs: dict[str, Path]  # LFN -> where the task writes it
    sources: list[str] = field(default_factory=list)  # "LFN:origin" for the report
    pinned: list[str] = field(default_factory=list)

    def environment(self) -> dict[str, str]:
        """What the task sees besides the pilot's own environment."""
        return {
            "TQ_INPUTS": " ".join(self.inputs),
            "TQ_OUTPUTS": " ".join(str(p) for p in self.outputs.values()),
            "TQ_TASK_ID": str(self.task.task_id),
            "TQ_TASK_NAME": self.task.name,
        }


def stage_in(task: TaskAssignment, workdir: Path, cache: PilotCache) -> Staged | Outcome:
    """The task's fresh directory, its inputs from the cache (pinned), its output directories;
    an Outcome instead when the task is refused or its stage-in fails (nothing left pinned)."""
    for lfn in (*task.inputs, *task.outputs):
        problem = lfn_problem(lfn)
        if problem is not None:
            return Outcome(REFUSED, [], f"task refused by the pilot: {problem}")
    task_dir = workdir / "tasks" / f"{task.task_id}.{task.attempt}"
    shutil.rmtree(task_dir, ignore_errors=True)
    task_dir.mkdir(parents=True)
    staged = Staged(task, task_dir, [], {})
    try:
        for lfn in task.inputs:
            path, origin = cache.acquire(lfn)
            staged.pinned.append(lfn)
            staged.inputs.append(str(path))
            staged.sources.append(f"{lfn}:{origin}")
        staged.outputs = {lfn: files.lfn_path(task_dir / "out", lfn) for lfn in task.outputs}
        for path in staged.outputs.values():
            path.parent.mkdir(parents=True, exist_ok=True)
    except (TaskQueueError, CacheError, TransferError, OSError, ValueError) as exc:
        release(cache, staged)
        return Outcome(STAGE_IN_FAILED, [], f"stage-in failed: {exc}")
    return staged


def release(cache: PilotCache, staged: Staged) -> None:
    """Unpin the task's inputs (the task is over)."""
    for lfn in staged.pinned:
        cache.store.unpin(lfn)
    staged.pinned.clear()


def finish(cache: PilotCache, staged: Staged, code: int, tail: str) -> Outcome:
    """The task exited with ``code``: a success's outputs go into the cache and to the SE."""
    produced = [lfn for lfn, path in staged.outputs.items() if path.is_file()]
    if code == 0:
        try:
            for lfn in produced:
                _stage_out(cache, staged.outputs[lfn], lfn)
        except (CacheError, TransferError, OSError) as exc:
            return Outcome(STAGE_OUT_FAILED, [], f"stage-out failed: {exc}\n{tail}")
    return Outcome(code, produced, f"inputs {' '.join(staged.sources)}\n{tail}")


def run_task(
    task: TaskAssignment,
    workdir: Path,
    cache: PilotCache,
    stop: threading.Event,
) -> Outcome:
    """Stage in (inputs pinned while it runs), run, stage out; never raises for task failures."""
    staged = stage_in(task, workdir, cache)
    if isinstance(staged, Outcome):
        return staged
    try:
        return _run(staged, cache, stop)
    finally:
        release(cache, staged)


def _run(staged: Staged, cache: PilotCache, stop: threading.Event) -> Outcome:
    task = staged.task
    env = {**os.environ, **staged.environment()}
    log_path = staged.task_dir / "task.log"
    try:
        with open(log_path, "wb") as log:
            process = start_task(shlex.split(task.command), staged.task_dir, env, log)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        reason = f"cannot start: {exc}"
        with contextlib.suppress(OSError):  # the task's log says it too (it is empty otherwise)
            log_path.write_text(f"glidein-ext pilot: {reason}\n")
        return Outcome(CANNOT_START, [], reason)
    try:
        code = _wait(process, float(task.max_runtime), stop)
    finally:
        kill_group(process)  # whatever way out: the task and what it started end here
    return finish(cache, staged, code, tail(log_path))


def tail(log_path: Path) -> str:
    """The end of the task's log, for its report."""
    try:
        with open(log_path, "rb") as log_file:
            log_file.seek(max(0, os.path.getsize(log_path) - 2000))
            return log_file.read().decode(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"


def _stage_out(cache: PilotCache, produced: Path, lfn: str) -> None:
    """Into the own cache (IV.C), then to the SE; an output too big to cache goes to the SE only."""
    try:
        kept = cache.keep_output(produced, lfn)
    except CacheError as exc:
        log.warning("output %s not cached: %s", lfn, exc)
        kept = produced
    cache.put_se(kept, lfn)


STOP_CHECK = 0.2  # seconds between looks at the pilot's stop and the task's time limit


def _wait(process: subprocess.Popen[bytes], limit: float, stop: threading.Event) -> int:
    """The task's exit code; killed (with its group) past ``limit`` seconds or when the pilot
    stops.  Its end is seen at once through a pidfd (Linux 5.3, Python 3.9); elsewhere
    ``Popen.wait`` looks with sleeps that grow to 50 ms, which a 0.2 s task pays each time."""
    deadline = time.monotonic() + limit
    ends = _pidfd(process.pid)
    try:
        while True:
            if ends is not None:
                ended, _, _ = select.select([ends], [], [], STOP_CHECK)
                if ended:  # readable once the task has ended: reaping it does not wait
                    return process.wait()
            else:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    return process.wait(timeout=STOP_CHECK)
            if stop.is_set() or time.monotonic() > deadline:
                kill_group(process)
                return process.wait()
    finally:
        if ends is not None:
            os.close(ends)


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` ends; None where there is none."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:  # an older kernel, or a sandbox that forbids it
        return None
