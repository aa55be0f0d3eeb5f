"""The pilot protocol's messages (seed 001 IV, IV-D, IV-E) as plain frozen dataclasses.

One definition shared by the three parties: the store returns them, the HTTP client parses them
from the service's JSON (``parse``: a ValueError naming the field on a malformed answer) and the
pilot agent reads their attributes.  ``to_json`` gives the wire form.  The service's pydantic
schemas (``tq.schemas``) describe the same shapes for OpenAPI and are built from these.

``parse`` reads each field by its annotation (``_READERS``); a field with a default may be missing
or null.  This module runs on worker nodes inside the pilot: Python 3.9 and the standard library
only (the annotations stay strings there, never evaluated).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, Union

# A ClassAd attribute value (glidein_ext.classads); Union: a runtime alias on Python 3.9.
Scalar = Union[bool, int, float, str]  # noqa: UP007
Counts = Mapping[str, int]
M = TypeVar("M")


@dataclass(frozen=True)
class Registration:
    """What a pilot sends at registration (seed IV-E: Host, SE, TTL, resources, its ClassAd)."""

    site: str
    host: str
    se: str = ""
    cpus: int = 1
    memory: int = 0  # MB
    disk: int = 0  # MB
    ttl: int | None = None  # seconds of life left; None: unlimited (the seed's Tier0 pilots)
    attributes: Mapping[str, Scalar] = field(default_factory=dict)
    requirements: str = "true"
    rank: str = "0"
    cache_dir: str = ""  # where the other pilots on the host find its cache (IV-D)
    cached: tuple[str, ...] = ()
    batch_id: str | None = None  # the batch job that started it (the PilotManager's id)


@dataclass(frozen=True)
class Neighbour:
    """Another live pilot on the same host, and where its cache is (seed IV-D)."""

    pilot_id: int
    cache_dir: str


@dataclass(frozen=True)
class RegisterAnswer:
    """The registration's answer: the PilotID, the heartbeat it owes, the pilots on its host."""

    pilot_id: int
    heartbeat_interval: int  # seconds
    cache_mode: str  # CacheMode's value: "pre-dht" or "centralized"
    others: tuple[Neighbour, ...] = ()
    # Room for the site DHT (seed 000): filled in by the distributed-scheduling issue.
    dht_id: str | None = None
    site_contacts: tuple[str, ...] = ()
    site_key: str | None = None


@dataclass(frozen=True)
class Assignment:
    """A task handed to a pilot (seed IV-E): what to run, its files, its time limit."""

    task_id: int
    attempt: int  # the completion names it: (task, attempt) is counted once
    name: str
    command: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    max_runtime: int  # seconds
    cached_inputs: int  # how many inputs the TQ believes the pilot already holds


@dataclass(frozen=True)
class HeartbeatAnswer:
    """Seed IV-D: the other live pilots on the pilot's host."""

    others: tuple[Neighbour, ...] = ()


@dataclass(frozen=True)
class Completion:
    """A pilot's report of a task's end: its exit code, the declared outputs it produced, the
    tail of its log."""

    task_id: int
    attempt: int
    exit_code: int
    outputs: tuple[str, ...] = ()
    report: str = ""


@dataclass(frozen=True)
class CompletionAnswer:
    """A completion's fate: counted (accepted), a repeat (duplicate), or stale (neither);
    ``state`` is the task's state after it."""

    accepted: bool
    duplicate: bool
    state: str


@dataclass(frozen=True)
class SubmitAnswer:
    """A workflow stored (all of it): its id and its number of tasks."""

    workflow_id: int
    tasks: int


@dataclass(frozen=True)
class WorkflowStatus:
    """One workflow and its tasks counted by state (every TaskState, zeros included)."""

    id: int
    name: str
    submitted_at: float
    tasks: Counts


@dataclass(frozen=True)
class Status:
    """The operators' view: workflows, pilots by site and state, completions counted."""

    workflows: tuple[WorkflowStatus, ...]
    pilots: Mapping[str, Counts]  # site -> state -> number (inactive: submitted, not yet here)
    completions: int
    queued_groups: int  # match groups with queued tasks in this TQ process's matcher


def parse(kind: type[M], data: Any) -> M:
    """The message ``kind`` read from decoded JSON; ValueError naming the field if malformed."""
    d = _object(data, kind.__name__)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(kind):  # type: ignore[arg-type]
        has_default = f.default is not dataclasses.MISSING
        if d.get(f.name) is None and (has_default or f.default_factory is not dataclasses.MISSING):
            continue
        try:
            read = _READERS[str(f.type)]
        except KeyError:
            raise TypeError(f"{kind.__name__}.{f.name}: no reader for {f.type}") from None
        try:
            values[f.name] = read(d.get(f.name, _MISSING))
        except ValueError as exc:
            raise ValueError(f"{kind.__name__}: field {f.name!r}: {exc}") from None
    return kind(**values)


def parse_assignment(data: Any) -> Assignment | None:
    """The request's answer ``{"task": Assignment | null}``: None when nothing fits now."""
    task = _object(data, "TaskResponse").get("task", _MISSING)
    if task is _MISSING:
        raise ValueError("TaskResponse: missing field 'task'")
    return None if task is None else parse(Assignment, task)


def to_json(message: Any) -> Any:
    """The wire form of a message: dataclasses as objects, tuples as lists, mappings as objects."""
    if dataclasses.is_dataclass(message) and not isinstance(message, type):
        return {f.name: to_json(getattr(message, f.name)) for f in dataclasses.fields(message)}
    if isinstance(message, (tuple, list)):
        return [to_json(item) for item in message]
    if isinstance(message, Mapping):
        return {str(key): to_json(value) for key, value in message.items()}
    return message


# --- reading JSON values, one reader per annotation ---

_MISSING: Any = object()


def _object(data: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ValueError(f"{what}: expected a JSON object, got {type(data).__name__}")
    return data


def _typed(kinds: tuple[type, ...], what: str) -> Callable[[Any], Any]:
    def read(value: Any) -> Any:
        if value is _MISSING:
            raise ValueError("missing")
        if isinstance(value, bool) and bool not in kinds:
            raise ValueError(f"expected {what}, got a boolean")
        if not isinstance(value, kinds):
            raise ValueError(f"expected {what}, got {type(value).__name__}")
        return value

    return read


def _optional(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else read(value)


def _tuple_of(read: Callable[[Any], Any]) -> Callable[[Any], tuple[Any, ...]]:
    as_list = _typed((list,), "a list")
    return lambda value: tuple(read(item) for item in as_list(value))


def _mapping_of(read: Callable[[Any], Any]) -> Callable[[Any], dict[str, Any]]:
    def read_mapping(value: Any) -> dict[str, Any]:
        if value is _MISSING:
            raise ValueError("missing")
        values = {}
        for key, item in _object(value, "the value").items():
            try:
                values[key] = read(item)
            except ValueError as exc:
                raise ValueError(f"{key!r}: {exc}") from None
        return values

    return read_mapping


def _message(kind: type[Any]) -> Callable[[Any], Any]:
    return lambda value: parse(kind, value)


_int = _typed((int,), "an integer")
_str = _typed((str,), "a string")
_READERS: dict[str, Callable[[Any], Any]] = {
    "int": _int,
    "str": _str,
    "bool": _typed((bool,), "a boolean"),
    "float": lambda value: float(_typed((int, float), "a number")(value)),
    "int | None": _optional(_int),
    "str | None": _optional(_str),
    "tuple[str, ...]": _tuple_of(_str),
    "tuple[Neighbour, ...]": _tuple_of(_message(Neighbour)),
    "tuple[WorkflowStatus, ...]": _tuple_of(_message(WorkflowStatus)),
    "Counts": _mapping_of(_int),
    "Mapping[str, Counts]": _mapping_of(_mapping_of(_int)),
}
