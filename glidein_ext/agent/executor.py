"""How a pilot executes a task: one small interface, a subprocess today.

The agent's loops (pulling from the Task Queue, or waiting for the master's assignment) only call
:meth:`TaskExecutor.execute`; what runs the task is behind it.  Today :class:`SubprocessExecutor`
stages the inputs in, runs the command as a subprocess in the pilot's thread (it dies with the
pilot, ``agent.taskproc``) and stages the outputs out (``agent.runner``).  A glidein whose startd
pulls the agent's tasks through HTCondor's FETCH_WORK hooks will put another executor here.

Besides the outcome, an execution says when the pilot began and ended it (stage-in and stage-out
included: the idle time between two of them is the seed's inter-task delay) and where its inputs
came from (the Task Queue's hit ratios).

Python 3.9, standard library only.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from glidein_ext.agent.pilot_cache import PilotCache
from glidein_ext.agent.runner import AGENT_ERROR, Outcome, run_task
from glidein_ext.tq.protocol import Assignment, Completion

log = logging.getLogger("glidein_ext.agent")


@dataclass(frozen=True)
class Execution:
    """A task's end as the pilot saw it."""

    task: Assignment
    outcome: Outcome
    started_at: float
    ended_at: float
    origins: dict[str, int] = field(default_factory=dict)

    def completion(self) -> Completion:
        """The report for the Task Queue (directly, or through the master)."""
        return Completion(
            self.task.task_id,
            self.task.attempt,
            self.outcome.exit_code,
            tuple(self.outcome.outputs),
            self.outcome.report,
            self.started_at,
            self.ended_at,
            dict(self.origins),
        )


class TaskExecutor:
    """Runs one task to its end; never raises for the task's own failures."""

    def execute(self, task: Assignment, stop: threading.Event) -> Execution:
        raise NotImplementedError


class SubprocessExecutor(TaskExecutor):
    """Stage in, run the command as a subprocess of the calling thread, stage out."""

    def __init__(self, workdir: Path, cache: PilotCache) -> None:
        self.workdir = workdir
        self.cache = cache

    def execute(self, task: Assignment, stop: threading.Event) -> Execution:
        started = time.time()
        self.cache.take_origins()  # a new task: count its inputs only
        try:
            outcome = run_task(task, self.workdir, self.cache, stop)
        except Exception as exc:  # a task never ends the pilot: it fails, max_retries applies
            log.exception("task %s could not be run", task.task_id)
            outcome = Outcome(AGENT_ERROR, [], f"the pilot could not run the task: {exc!r}"[:2000])
        return Execution(task, outcome, started, time.time(), self.cache.take_origins())
