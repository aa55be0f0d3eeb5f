"""The simulated workflow: the project's own W1/W2/W3 generator and parser (Hasham 2011 §V), and
when each task becomes runnable (every input exists), pure.

Delgado Peris 2014 §IV names the same three shapes: *serial chain* (each file read by one job) is
W1,
*splitting* (each file read by two jobs) is W2, *merging* (each job reads two files) is W3.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from glidein_ext.tq.models import MatchSpec
from glidein_ext.tq.workflow import generate, parse_workflow


@dataclass(frozen=True)
class SimTask:
    """One task: the parsed workflow's task with a numeric id (its position, from 1)."""

    task_id: int
    name: str
    step: int
    spec: MatchSpec
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def build(kind: str, scale: float) -> list[SimTask]:
    """The tasks of W1/W2/W3 at ``scale``, through the real generator and parser.  The
    simulator runs no command: each task's is ``true`` (splitting and checking the generator's
    shell line would be most of the parse, about 0.8 ms a task)."""
    data = generate(kind, scale)
    for raw in data["tasks"]:
        raw["command"] = "true"
    workflow = parse_workflow(data)
    return [
        SimTask(index, t.name, t.step, t.spec, t.inputs, t.outputs)
        for index, t in enumerate(workflow.tasks, start=1)
    ]


class Dependencies:
    """Which tasks wait for which files; a file's production releases its readers."""

    def __init__(self, tasks: list[SimTask]) -> None:
        self.tasks = {task.task_id: task for task in tasks}
        self.existing: set[str] = set()
        self._missing: dict[int, set[str]] = {}
        self._readers: defaultdict[str, list[int]] = defaultdict(list)
        self._maker = {lfn: task.task_id for task in tasks for lfn in task.outputs}
        for task in tasks:
            if task.inputs:
                self._missing[task.task_id] = set(task.inputs)
                for lfn in task.inputs:
                    self._readers[lfn].append(task.task_id)

    def initial(self) -> list[int]:
        """The tasks runnable at submission (no inputs), in order."""
        return [t for t in self.tasks if t not in self._missing]

    def produced(self, lfns: tuple[str, ...]) -> list[int]:
        """Files now exist: the tasks that became runnable, in order."""
        released = []
        for lfn in lfns:
            if lfn in self.existing:
                continue
            self.existing.add(lfn)
            for reader in self._readers.get(lfn, ()):
                missing = self._missing.get(reader)
                if missing is None:
                    continue
                missing.discard(lfn)
                if not missing:
                    del self._missing[reader]
                    released.append(reader)
        return sorted(released)

    def successors(self, lfns: tuple[str, ...]) -> list[tuple[int, tuple[int, ...]]]:
        """The waiting tasks that read these files, in order, each with the tasks that make
        its other missing inputs (a merge's other makers; empty: these files alone release
        it): a task's successors (``sched.stock``).  A reader of a file no task makes is
        left out."""
        made = set(lfns)
        found = {}
        for lfn in lfns:
            for reader in self._readers.get(lfn, ()):
                missing = self._missing.get(reader)
                if missing is None or reader in found:
                    continue
                rest = missing - made
                if all(other in self._maker for other in rest):
                    found[reader] = tuple(sorted({self._maker[other] for other in rest}))
        return sorted(found.items())

    def readers(self, lfns: tuple[str, ...]) -> int:
        """How many waiting tasks read any of these files."""
        return len({r for lfn in lfns for r in self._readers.get(lfn, ()) if r in self._missing})

    @property
    def waiting(self) -> int:
        return len(self._missing)

    def waiting_ids(self) -> list[int]:
        """The tasks still waiting for an input, in order."""
        return sorted(self._missing)
