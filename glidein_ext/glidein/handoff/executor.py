"""A glidein's executor: the task runs as an HTCondor job of the glidein's own startd.

Hasham 2011 §IV in a glidein: the pilot stages the task's inputs in as ``pilot run`` does
(``agent.runner``: inputs pinned in the lane's cache, a fresh task directory with its output
paths), then offers it on the board (``handoff.board``); the startd's FETCH_WORK hook takes it as a
job ad (``handoff.taskad``: the task's command and arguments, ``TQ_INPUTS`` / ``TQ_OUTPUTS`` /
``TQ_TASK_ID`` / ``TQ_TASK_NAME`` as ``pilot run`` gives them, ``Iwd`` = the task directory), the
starter runs it, and JOB_EXIT says how it ended.  A task that exited is staged out and reported
like a subprocess's; one HTCondor evicted (or that never started) is ``evicted``: the lane gives
it back to the Task Queue instead of reporting a failure.  The task's ``max_runtime`` is enforced
here: past it, the job (the starter's child) gets SIGTERM, then SIGKILL after KILL_GRACE seconds,
and its end is reported as the failure it is.

Python 3.9, standard library only.
"""

from __future__ import annotations

import logging
import os
import secrets
import shlex
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from glidein_ext.agent import runner
from glidein_ext.agent.executor import Execution, TaskExecutor
from glidein_ext.agent.pilot_cache import PilotCache
from glidein_ext.agent.runner import AGENT_ERROR, CANNOT_START, Outcome, Staged
from glidein_ext.agent.taskproc import signal_children
from glidein_ext.glidein.handoff import taskad
from glidein_ext.glidein.handoff.board import Board
from glidein_ext.glidein.handoff.core import EndKind, HandedTask, Stage
from glidein_ext.tq.client.protocol import TaskAssignment

log = logging.getLogger("glidein_ext.agent")
KILL_GRACE = 5.0
DEFAULT_MEMORY = 128  # MB per CPU when neither the task nor the slot says more
DEFAULT_DISK = 100 * 1024  # KiB, when the task does not say
EVICTED = 99  # an evicted execution's code: never reported (the task is given back)


@dataclass(frozen=True)
class GlideinIdentity:
    """Who the tasks run as, and what names them."""

    name: str  # the glidein's name: the GlobalJobId's first part
    owner: str  # the Unix user the glidein runs as (the job ad's Owner)
    path: str  # PATH, to find a task's command and for the task itself


def resolve(command: str, path: str, task_dir: Path) -> list[str]:
    """The task's words, the first an absolute executable; ValueError naming the problem."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise ValueError(f"cannot split the command: {exc}") from None
    if not words:
        raise ValueError("the command is empty")
    head = words[0]
    found: str | None
    if "/" in head:
        candidate = head if head.startswith("/") else str(task_dir / head)
        found = candidate if os.path.isfile(candidate) and os.access(candidate, os.X_OK) else None
    else:
        found = shutil.which(head, path=path)
    if found is None:
        raise ValueError(f"{head!r} is not an executable on PATH={path}")
    return [os.path.abspath(found), *words[1:]]


@dataclass(eq=False)
class StartdExecutor(TaskExecutor):
    """One lane of a glidein: hands its tasks to the startd through the board."""

    board: Board
    lane: int
    workdir: Path
    cache: PilotCache
    identity: GlideinIdentity
    clock: Callable[[], float] = time.time

    # --- room ---

    def wait_room(self, stop: threading.Event) -> bool:
        return self.board.wait_room(stop)

    def asked(self) -> None:
        self.board.asked()

    def has_room(self) -> bool:
        return self.board.has_room()

    def closed(self) -> bool:
        return self.board.closed

    # --- a task ---

    def execute(self, task: TaskAssignment, stop: threading.Event) -> Execution:
        started = self.clock()
        self.cache.take_origins()  # a new task: count its inputs only
        staged = runner.stage_in(task, self.workdir, self.cache)
        evicted = False
        if isinstance(staged, Outcome):
            outcome = staged
        else:
            try:
                outcome, evicted = self._through_startd(staged, stop)
            except Exception as exc:  # a task never ends the pilot: it fails (logged)
                log.exception("task %s could not be handed to the startd", task.task_id)
                outcome = Outcome(AGENT_ERROR, [], f"the pilot could not run the task: {exc!r}")
            finally:
                runner.release(self.cache, staged)
        origins = self.cache.take_origins()
        return Execution(task, outcome, started, self.clock(), origins, evicted)

    def job(self, staged: Staged, secret: str = "0" * 32) -> taskad.TaskJob:
        """The task's job (ValueError when it cannot be one: no such command...)."""
        task = staged.task
        arguments = resolve(task.command, self.identity.path, staged.task_dir)
        cpus = max(1, task.request_cpus)
        per_cpu = self.board.default_memory() or DEFAULT_MEMORY
        return taskad.TaskJob(
            task_id=task.task_id,
            attempt=task.attempt,
            name=task.name,
            executable=arguments[0],
            arguments=arguments[1:],
            iwd=str(staged.task_dir),
            stdout=str(staged.task_dir / "task.out"),
            stderr=str(staged.task_dir / "task.err"),
            owner=self.identity.owner,
            global_job_id=f"{self.identity.name}#tq{task.task_id}.{task.attempt}#{int(self.clock())}",
            submitted=int(self.clock()),
            max_runtime=task.max_runtime,
            request_cpus=cpus,
            request_memory=task.request_memory or per_cpu * cpus,
            request_disk=task.request_disk * 1024 if task.request_disk else DEFAULT_DISK,
            lane=self.lane,
            environment={"PATH": self.identity.path, **staged.environment()},
            secret=secret,
        )

    def _through_startd(self, staged: Staged, stop: threading.Event) -> tuple[Outcome, bool]:
        task = staged.task
        secret = secrets.token_hex(16)
        try:
            job = self.job(staged, secret)
            ad = taskad.job_ad(job)
        except ValueError as exc:
            return Outcome(CANNOT_START, [], f"cannot start: {exc}"), False
        key = (task.task_id, task.attempt)
        handoff = HandedTask(
            key,
            self.lane,
            job.request_cpus,
            job.request_memory,
            job.request_disk,
            ad,
            secret=secret,
        )
        if not self.board.offer(handoff):
            return Outcome(EVICTED, [], "the glidein takes no more tasks"), True
        log.info("lane %d: task %s offered to the startd", self.lane, task.task_id)
        end = self.board.wait_end(key, stop, self._watchdog(task))
        if end.kind is not EndKind.EXITED:
            # evicted is not the task's end but HTCondor's or the hand-off's: say why where the
            # glidein's log shows it (cancelled, never started, is the retiring glidein's).
            level = logging.WARNING if end.kind is EndKind.EVICTED else logging.INFO
            what = (self.lane, task.task_id, end.kind.value, end.detail)
            log.log(level, "lane %d: task %s %s: %s", *what)
            return Outcome(EVICTED, [], f"not run to its end: {end.detail}"), True
        tail = runner.tail(staged.task_dir / "task.out") + runner.tail(staged.task_dir / "task.err")
        if end.detail:
            tail = f"{end.detail}\n{tail}"
        return runner.finish(self.cache, staged, end.exit_code, tail), False

    def _watchdog(self, task: TaskAssignment) -> Callable[[HandedTask, float], None]:
        """Kill the job past the task's max_runtime (Hasham 2011: MaxRunTime), SIGTERM then
        SIGKILL."""
        sent: dict[int, float] = {}

        def watch(handoff: HandedTask, now: float) -> None:
            if handoff.stage is not Stage.RUNNING or handoff.starter is None:
                return
            if now - handoff.since <= task.max_runtime:
                return
            if signal.SIGTERM not in sent:
                why = f"killed at its max_runtime of {task.max_runtime} s"
                self.board.killed(handoff.key, why)
                log.warning("lane %d: task %s %s", self.lane, task.task_id, why)
                signal_children(handoff.starter, signal.SIGTERM)
                sent[signal.SIGTERM] = now
            elif signal.SIGKILL not in sent and now - sent[signal.SIGTERM] > KILL_GRACE:
                signal_children(handoff.starter, signal.SIGKILL)
                sent[signal.SIGKILL] = now

        return watch
