"""How a pilot executes a task: one small interface, two executors.

The agent's loops (pulling from the Task Queue, or waiting for the master's assignment) only call
:class:`TaskExecutor`: ``wait_room`` before asking for a task (an executor may have no room now),
``has_room`` when a distributed worker answers a TaskList, ``execute`` to run one task.
:class:`SubprocessExecutor` stages the inputs in, runs the command as a subprocess in the pilot's
thread (it dies with the pilot, ``agent.taskproc``) and stages the outputs out (``agent.runner``);
it always has room.  In a glidein, ``glidein.handoff.executor.StartdExecutor`` hands the task to
the glidein's own startd through HTCondor's fetch-work hooks instead.

Besides the outcome, an execution says when the pilot began and ended it (stage-in and stage-out
included: the idle time between two of them is the paper's inter-task delay), where its inputs came
from (the Task Queue's hit ratios), and whether it was ``evicted``: it did not run to its end for a
reason that is not the task's (HTCondor evicted it, the glidein is leaving): then it is not
reported as a failure; the pilot gives it back (the Task Queue requeues it) or runs it again.

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
from glidein_ext.tq.client.protocol import Completion, TaskAssignment

log = logging.getLogger("glidein_ext.agent")


@dataclass(frozen=True)
class Execution:
    """A task's end as the pilot saw it."""

    task: TaskAssignment
    outcome: Outcome
    started_at: float
    ended_at: float
    origins: dict[str, int] = field(default_factory=dict)
    evicted: bool = False  # not run to its end, through no fault of the task: never reported

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

    def wait_room(self, stop: threading.Event) -> bool:
        """Block until one more task could run here (True: then call :meth:`asked` once the
        request is answered), or False: this executor takes no more tasks (the pilot leaves)."""
        return not stop.is_set()

    def asked(self) -> None:
        """The request that :meth:`wait_room` allowed is answered (a task or none)."""

    def has_room(self) -> bool:
        """Could one more task run here now?  (A distributed worker ranks TaskLists only then.)"""
        return True

    def closed(self) -> bool:
        """This executor takes no more tasks (its glidein is retiring)."""
        return False

    def execute(self, task: TaskAssignment, stop: threading.Event) -> Execution:
        raise NotImplementedError


class SubprocessExecutor(TaskExecutor):
    """Stage in, run the command as a subprocess of the calling thread, stage out."""

    def __init__(self, workdir: Path, cache: PilotCache) -> None:
        self.workdir = workdir
        self.cache = cache

    def execute(self, task: TaskAssignment, stop: threading.Event) -> Execution:
        started = time.time()
        self.cache.take_origins()  # a new task: count its inputs only
        try:
            outcome = run_task(task, self.workdir, self.cache, stop)
        except Exception as exc:  # a task never ends the pilot: it fails, max_retries applies
            log.exception("task %s could not be run", task.task_id)
            outcome = Outcome(AGENT_ERROR, [], f"the pilot could not run the task: {exc!r}"[:2000])
        if outcome.exit_code != 0 and not stop.is_set():  # the operator sees why in the pilot's log
            last = outcome.report.strip().splitlines()[-1:] or ["(no report)"]
            log.warning(
                "task %s (%s) failed with exit code %s: %s",
                task.task_id,
                task.name,
                outcome.exit_code,
                last[0][:300],
            )
        return Execution(task, outcome, started, time.time(), self.cache.take_origins())
