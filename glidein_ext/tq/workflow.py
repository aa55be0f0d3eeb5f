"""Workflow files (YAML or JSON) and the paper's W1/W2/W3 generators (Hasham 2011 §IV, V).

A workflow is tasks with a command, ClassAd Requirements and Rank, input and output LFNs, a step and
explicit dependencies (``after``).  A task becomes runnable when all its inputs exist and its
``after`` tasks are done.  Parsing is pure and checks everything first, with the TQ's limits
(``tq.client.limits``: integers in sane ranges, texts the database holds, ClassAd expressions that
parse, plain attribute names, LFNs a pilot can write): a bad file raises one WorkflowError naming
the task and the field, with no value printed whole, and nothing is submitted.  Files are read
bounded (``tq.datafile``: size, UTF-8, YAML without aliases, nesting depth).
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from glidein_ext import classads
from glidein_ext.errors import WorkflowError
from glidein_ext.tq.client.limits import (
    MAX_NAME_CHARS,
    attribute_name_problem,
    expr_problem,
    int_problem,
    lfn_problem,
    printable_problem,
    scalar_problem,
    shorten,
    text_problem,
)
from glidein_ext.tq.datafile import load_file
from glidein_ext.tq.models import MatchSpec

_INT_FIELDS = ("request_cpus", "request_memory", "request_disk", "max_runtime", "priority")
_INHERITED = ("requirements", "rank", *_INT_FIELDS, "max_retries")
TASK_FIELDS = {
    "name",
    "step",
    "command",
    "inputs",
    "outputs",
    "after",
    "attributes",
    *_INHERITED,
}
_TOP_FIELDS = {"name", "defaults", "available", "tasks"}
MAX_TASKS = 1_000_000
MAX_FILE_BYTES = 32 * 2**20  # a workflow file; the TQ's default request limit is the same


@dataclass(frozen=True)
class TaskDef:
    """One task of a workflow, checked."""

    name: str
    command: str
    spec: MatchSpec
    step: int = 0
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    priority: int = 0
    max_retries: int = 2


@dataclass(frozen=True)
class WorkflowDef:
    """A checked workflow: its tasks, and the LFNs it declares as already existing (on an SE)."""

    name: str
    tasks: tuple[TaskDef, ...]
    available: tuple[str, ...] = ()
    external_inputs: frozenset[str] = field(default_factory=frozenset)


def read_workflow_data(path: str) -> Any:
    """The plain data of a YAML or JSON workflow file, read bounded (not yet checked)."""
    return load_file(path, MAX_FILE_BYTES, WorkflowError)


def load_workflow_file(path: str) -> WorkflowDef:
    """Read and check a YAML or JSON workflow file."""
    return parse_workflow(read_workflow_data(path))


def _name_problem(value: Any) -> str | None:
    if isinstance(value, str) and not value.strip():
        return "must be a non-empty string"
    return printable_problem(value, MAX_NAME_CHARS)


def _strings(
    value: Any, task: str | None, name: str, check: Callable[[Any], str | None]
) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise WorkflowError(f"must be a list, got {shorten(value)}", task, name)
    for item in value:
        problem = check(item)
        if problem is not None:
            raise WorkflowError(problem, task, name)
    if len(set(value)) != len(value):
        raise WorkflowError("has duplicates", task, name)
    return tuple(value)


def _int(value: Any, task: str | None, name: str) -> int:
    problem = int_problem(value, name)
    if problem is not None:
        raise WorkflowError(problem, task, name)
    assert isinstance(value, int)
    return value


def _expr(value: Any, task: str | None, name: str) -> str:
    problem = _text_problem(value) if type(value) is str else expr_problem(value)
    if problem is not None:
        raise WorkflowError(problem, task, name)
    assert isinstance(value, str)
    return value


@functools.lru_cache(maxsize=1024)
def _text_problem(text: str) -> str | None:
    """``expr_problem`` once per text: a workflow's tasks mostly share their Requirements and
    Rank, and classad2 parsing them is a third of a submission's CPU."""
    return expr_problem(text)


def _attributes(value: Any, task: str) -> tuple[tuple[str, classads.Scalar], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise WorkflowError("must be a mapping of names to literals", task, "attributes")
    items = []
    for key, item in value.items():
        problem = attribute_name_problem(key)
        if problem is None:
            problem = scalar_problem(item)
            if problem is not None:
                problem = f"attribute {key!r} {problem}"
        if problem is not None:
            raise WorkflowError(problem, task, "attributes")
        items.append((key, item))
    return tuple(sorted(items))


# A spec with the repr of each attribute's value: Python's equality takes 1, 1.0 and True
# (and 0.0 and -0.0) for one value, ClassAds and the group key do not.
_Exact = tuple[MatchSpec, tuple[str, ...]]


# shlex's quotes and escape: a printable command without them is its words joined by spaces,
# each one printable (what ``_check_words`` checks of any other)
_QUOTING = frozenset("'\"\\")


def _check_words(command: str, name: str) -> None:
    """WorkflowError unless the command splits into words (POSIX shell rules), each printable:
    each word goes into a job ad (a glidein's Cmd and Arguments), one attribute a line."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise WorkflowError(f"cannot be split into words: {exc}", name, "command") from None
    for word in words:
        problem = printable_problem(word)
        if problem is not None:
            raise WorkflowError(f"a word {problem}", name, "command")


def _task(
    raw: Any, index: int, defaults: Mapping[str, Any], specs: dict[_Exact, MatchSpec]
) -> TaskDef:
    """One task checked; ``specs``: the workflow's specs so far, so that equal specs are one
    object (its group key is made once: ``MatchSpec.key``)."""
    if not isinstance(raw, Mapping):
        raise WorkflowError(f"tasks[{index}] must be a mapping")
    name = raw.get("name")
    problem = _name_problem(name)
    if problem is not None:
        raise WorkflowError(f"tasks[{index}]: {problem}", None, "name")
    assert isinstance(name, str)
    unknown = sorted(set(raw) - TASK_FIELDS, key=str)
    if unknown:
        raise WorkflowError("unknown field", name, str(unknown[0])[:40])
    merged = {**defaults, **raw}
    command = merged.get("command")
    problem = text_problem(command)
    if problem is not None or not isinstance(command, str) or not command.strip():
        raise WorkflowError(problem or "must be a non-empty string", name, "command")
    if not (command.isprintable() and _QUOTING.isdisjoint(command)):
        _check_words(command, name)
    ints = {key: _int(merged[key], name, key) for key in _INT_FIELDS if key in merged}
    spec = MatchSpec(
        requirements=_expr(merged.get("requirements", "true"), name, "requirements"),
        rank=_expr(merged.get("rank", "0"), name, "rank"),
        request_cpus=ints.get("request_cpus", 1),
        request_memory=ints.get("request_memory", 0),
        request_disk=ints.get("request_disk", 0),
        max_runtime=ints.get("max_runtime", 3600),
        attributes=_attributes(merged.get("attributes"), name),
    )
    return TaskDef(
        name=name,
        command=command,
        spec=specs.setdefault((spec, tuple(repr(v) for _, v in spec.attributes)), spec),
        step=_int(merged.get("step", 0), name, "step"),
        inputs=_strings(merged.get("inputs"), name, "inputs", lfn_problem),
        outputs=_strings(merged.get("outputs"), name, "outputs", lfn_problem),
        after=_strings(merged.get("after"), name, "after", _name_problem),
        priority=ints.get("priority", 0),
        max_retries=_int(merged.get("max_retries", 2), name, "max_retries"),
    )


def _check_graph(tasks: list[TaskDef], available: set[str]) -> frozenset[str]:
    """Unique outputs, known ``after`` names, no cycles; returns inputs produced by no task."""
    names = {task.name for task in tasks}
    producer: dict[str, str] = {}
    for task in tasks:
        for lfn in task.outputs:
            if lfn in producer:
                raise WorkflowError(
                    f"{lfn!r} is also an output of {producer[lfn]!r}", task.name, "outputs"
                )
            if lfn in available:
                raise WorkflowError(f"{lfn!r} is declared available", task.name, "outputs")
            producer[lfn] = task.name
    deps: dict[str, set[str]] = {}
    external: set[str] = set()
    for task in tasks:
        for other in task.after:
            if other not in names:
                raise WorkflowError(f"no task named {other!r}", task.name, "after")
        needed = set(task.after)
        for lfn in task.inputs:
            if lfn in producer:
                needed.add(producer[lfn])
            elif lfn not in available:
                external.add(lfn)
        if task.name in needed:
            raise WorkflowError("a task cannot depend on itself", task.name, "inputs")
        deps[task.name] = needed
    # Kahn's algorithm: whatever is left over sits on a cycle.
    indegree = {name: len(d) for name, d in deps.items()}
    users: dict[str, list[str]] = {name: [] for name in names}
    for name, needed in deps.items():
        for other in needed:
            users[other].append(name)
    ready = [name for name, count in indegree.items() if count == 0]
    seen = 0
    while ready:
        name = ready.pop()
        seen += 1
        for user in users[name]:
            indegree[user] -= 1
            if indegree[user] == 0:
                ready.append(user)
    if seen != len(names):
        stuck = sorted(name for name, count in indegree.items() if count > 0)[0]
        raise WorkflowError("dependencies form a cycle", stuck, "after")
    return frozenset(external)


def parse_workflow(data: Any) -> WorkflowDef:
    """Check a workflow given as plain data (from YAML or JSON)."""
    if not isinstance(data, Mapping):
        raise WorkflowError("a workflow must be a mapping with a 'tasks' list")
    unknown = sorted(set(data) - _TOP_FIELDS, key=str)
    if unknown:
        raise WorkflowError(f"unknown top-level field {shorten(unknown[0], 40)}")
    name = data.get("name", "workflow")
    problem = _name_problem(name)
    if problem is not None:
        raise WorkflowError(f"workflow name {problem}", None, "name")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, Mapping) or set(defaults) - set(_INHERITED) - {"command"}:
        raise WorkflowError(f"defaults may only set {', '.join(_INHERITED)}", None, "defaults")
    available = _strings(data.get("available"), None, "available", lfn_problem)
    raw_tasks = data.get("tasks")
    if not isinstance(raw_tasks, list) or not raw_tasks:
        raise WorkflowError("a workflow needs a non-empty 'tasks' list", None, "tasks")
    if len(raw_tasks) > MAX_TASKS:
        raise WorkflowError(f"more than {MAX_TASKS} tasks", None, "tasks")
    specs: dict[_Exact, MatchSpec] = {}
    tasks = [_task(raw, index, defaults, specs) for index, raw in enumerate(raw_tasks)]
    seen: set[str] = set()
    for task in tasks:
        if task.name in seen:
            raise WorkflowError("duplicate task name", task.name, "name")
        seen.add(task.name)
    external = _check_graph(tasks, set(available))
    return WorkflowDef(name, tuple(tasks), available, external)


# --- the paper's workflows (Hasham 2011 §V): step0 then step1 ---

# Each task writes every output: a line naming the task, its inputs' contents, and ``size`` bytes.
_BODY = (
    'for o in $TQ_OUTPUTS; do mkdir -p "$(dirname "$o")"; '
    '{{ echo {name}; for i in $TQ_INPUTS; do cat "$i"; done; head -c {size} /dev/zero; }} > "$o"; '
    "done; sleep {sleep}"
)


def _command(name: str, size: int, sleep: float) -> str:
    return shlex.join(["sh", "-c", _BODY.format(name=name, size=size, sleep=sleep)])


def _gen(
    kind: str, step0: int, step1: int, inputs_of: Any, size: int, sleep: float
) -> dict[str, Any]:
    def task(step: int, index: int, inputs: Sequence[int] = ()) -> dict[str, Any]:
        name = f"{kind}-s{step}-{index:04d}"
        made: dict[str, Any] = {"name": name, "step": step, "command": _command(name, size, sleep)}
        if step:  # step1 reads step0 files
            made["inputs"] = [f"/store/{kind}/step0/f{i:04d}.dat" for i in inputs]
        made["outputs"] = [f"/store/{kind}/step{step}/f{index:04d}.dat"]
        return made

    tasks = [task(0, i) for i in range(step0)] + [task(1, j, inputs_of(j)) for j in range(step1)]
    return {"name": kind, "defaults": {"max_runtime": 600}, "tasks": tasks}


def generate(kind: str, scale: float = 1.0, size: int = 0, sleep: float = 0.0) -> dict[str, Any]:
    """W1 (serial chain, 80 -> 80), W2 (splitting, 40 -> 80), W3 (merging, 80 -> 40).

    ``scale`` shrinks or grows the task counts (at least 1 or 2 tasks per step).
    """
    n = max(1, round(40 * scale))
    if kind == "w1":
        chains = max(1, round(80 * scale))
        return _gen("w1", chains, chains, lambda j: [j], size, sleep)
    if kind == "w2":
        return _gen("w2", n, 2 * n, lambda j: [j // 2], size, sleep)
    if kind == "w3":
        return _gen("w3", 2 * n, n, lambda j: [2 * j, 2 * j + 1], size, sleep)
    raise WorkflowError(f"unknown workflow kind {kind!r} (expected w1, w2 or w3)")
