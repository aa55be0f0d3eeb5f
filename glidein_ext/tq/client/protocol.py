"""The pilot protocol's messages (Hasham 2011 §IV, IV-D, IV-E) as plain frozen dataclasses.

One definition shared by the three parties: the store returns them, the HTTP client parses them
from the service's JSON (``parse``: a ValueError naming the field on a malformed answer) and the
pilot agent reads their attributes.  ``to_json`` gives the wire form.  The service's pydantic
schemas (``tq.service.api.schemas``) describe the same shapes for OpenAPI and are built from these.

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
Scalar = Union[bool, int, float, str]
Counts = Mapping[str, int]
M = TypeVar("M")
API = "/api/v1"  # the prefix of every call of the Task Queue's API (its version)


@dataclass(frozen=True)
class Registration:
    """What a pilot sends at registration (Hasham 2011 §IV-E: Host, SE, TTL, resources, its
    ClassAd)."""

    site: str
    host: str
    se: str = ""
    cpus: int = 1
    memory: int = 0  # MB
    disk: int = 0  # MB
    ttl: int | None = None  # seconds of life left; None: unlimited (the paper's Tier0 pilots)
    attributes: Mapping[str, Scalar] = field(default_factory=dict)
    requirements: str = "true"
    rank: str = "0"
    cache_dir: str = ""  # where the other pilots on the host find its cache (IV-D)
    cached: tuple[str, ...] = ()
    batch_id: str | None = None  # the batch job that started it (the PilotManager's id)
    # The site DHT (Delgado Peris 2014 §III.A): where its DHT node and its peer file server listen.
    dht_address: str | None = None  # "host:port" (UDP)
    peer_url: str | None = None  # "http://host:port"


@dataclass(frozen=True)
class Neighbour:
    """Another live pilot on the same host, and where its cache is (Hasham 2011 §IV-D)."""

    pilot_id: int
    cache_dir: str


@dataclass(frozen=True)
class MasterInfo:
    """A distributed site's master pilot (Delgado Peris 2014 §III.B): who, where its DHT node
    listens, and the epoch the Task Queue handed out with the role (every master call carries
    it)."""

    pilot_id: int
    dht_address: str  # "host:port"
    epoch: int


@dataclass(frozen=True)
class RegisterAnswer:
    """The registration's answer: the PilotID, the heartbeat it owes, the pilots on its host; with
    a site DHT (Delgado Peris 2014 §III.A) its DHT id, up to k live pilots of its site to join
    through, the site's key (hex), and in the distributed architecture the site's master."""

    pilot_id: int
    heartbeat_interval: int  # seconds
    others: tuple[Neighbour, ...] = ()
    dht_id: str | None = None  # 40 hex digits
    site_contacts: tuple[str, ...] = ()  # "host:port" of live pilots' DHT nodes
    site_key: str | None = None  # hex; authenticates the site's DHT and peer transfers
    architecture: str = "pre-dht"  # pre-dht, centralized or distributed (Delgado Peris 2014 §IV)
    master: MasterInfo | None = None  # distributed: the master (this pilot, if it is)
    master_timeout: int = 60  # seconds the master may be silent before another takes over
    pilot_key: str | None = None  # distributed: hex; this pilot's own key (tq.client.pilotkeys)
    # The service answers ``complete-and-request`` (``CompleteAndRequest``): a busy pilot makes
    # one call per task.  False from a service that does not say: the two calls.
    complete_and_request: bool = False
    # The service takes several pilots' ``complete-and-request`` in one request (``Reports``):
    # the pilots of one process may send theirs together.  False: each its own request.
    batched_reports: bool = False


@dataclass(frozen=True)
class TaskAssignment:
    """A task handed to a pilot (Hasham 2011 §IV-E): what to run, its files, its time limit."""

    task_id: int
    attempt: int  # the completion names it: (task, attempt) is counted once
    name: str
    command: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    max_runtime: int  # seconds
    cached_inputs: int  # how many inputs the TQ believes the pilot already holds
    # What it asks of the pilot's resources (a glidein's startd carves its slot from them).
    request_cpus: int = 1
    request_memory: int = 0  # MB; 0: unspecified
    request_disk: int = 0  # MB; 0: unspecified


@dataclass(frozen=True)
class TaskRequest:
    """Centralized mode: the pilot's cached files with each request (Hasham 2011 §IV-E)."""

    cached: tuple[str, ...] | None = None  # None: the pilot does not say (the TQ keeps its list)
    # Lee 2003 §4.2.3 (courier): nothing fits, keep the request open this many seconds as a
    # standing offer an urgent task is pushed to (capped by the setting offer_max_wait).
    wait: float = 0.0


@dataclass(frozen=True)
class Heartbeat:
    """Hasham 2011 §IV-D: a pilot's heartbeat, with the files it caches (if it says)."""

    cached: tuple[str, ...] | None = None


@dataclass(frozen=True)
class HeartbeatAnswer:
    """Hasham 2011 §IV-D: the other live pilots on the pilot's host.  ``needed_cached``: of the
    files the Task Queue holds for this pilot's cache, those a queued task reads (at most
    ``MAX_NEEDED_CACHED``, so a lower bound when that many; None: a Task Queue that does not
    say); the pilot sums their sizes for ``CACHED_INPUT_NEEDED_MB`` (``cache.need``)."""

    others: tuple[Neighbour, ...] = ()
    needed_cached: tuple[str, ...] | None = None


MAX_NEEDED_CACHED = 1000  # names in a heartbeat's answer


@dataclass(frozen=True)
class Completion:
    """A pilot's report of a task's end: its exit code, the declared outputs it produced, the
    tail of its log."""

    task_id: int
    attempt: int
    exit_code: int
    outputs: tuple[str, ...] = ()
    report: str = ""
    # For the run's counters (beyond the paper): when the pilot began and ended the task (unix
    # time, stage-in and stage-out included) and where its inputs came from (cache: its own
    # cache, host: a pilot on the same host, peer: a pilot of the site through the DHT, se).
    started_at: float | None = None
    ended_at: float | None = None
    origins: Counts = field(default_factory=dict)


@dataclass(frozen=True)
class CompletionAnswer:
    """A completion's fate: counted (accepted), a repeat (duplicate), or stale (neither);
    ``state`` is the task's state after it."""

    accepted: bool
    duplicate: bool
    state: str


@dataclass(frozen=True)
class CompleteAndRequest:
    """A busy pilot's one call per task: the end of its task and its request for the next
    (Hasham 2011 §IV-E, late binding: the next task is matched when the pilot asks, here in the
    transaction that records the end).  ``cached``: as a ``TaskRequest``'s."""

    completion: Completion
    cached: tuple[str, ...] | None = None


@dataclass(frozen=True)
class CompleteAndRequestAnswer:
    """The completion's fate and the pilot's next task (None: nothing fits now, or the
    completion queued tasks, which only a request after its commit may choose: the pilot asks
    again at once, with a plain request)."""

    result: CompletionAnswer
    task: TaskAssignment | None = None


@dataclass(frozen=True)
class PilotReport:
    """One pilot's ``CompleteAndRequest`` among several sent together (``Reports``)."""

    pilot_id: int
    completion: Completion
    cached: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Reports:
    """The ``complete-and-request`` calls of several pilots of one process (a glidein's slots,
    ``pilot run --pilots N``), sent in one request when they are ready at once.  Each is served
    as it would be alone, in the order given: its own answer or error (``ReportOutcome``); one
    pilot's refusal never touches another's call."""

    reports: tuple[PilotReport, ...]


@dataclass(frozen=True)
class ReportOutcome:
    """One report's fate: ``status`` 200 and ``answer``; or the status and the one-line
    ``detail`` the call alone would have been answered with (403, 404, 422, 503)."""

    status: int
    answer: CompleteAndRequestAnswer | None = None
    detail: str = ""


@dataclass(frozen=True)
class ReportsAnswer:
    """The outcome of each of ``Reports.reports``, in their order."""

    outcomes: tuple[ReportOutcome, ...]


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


# --- the distributed architecture: the master's calls (Delgado Peris 2014 §III.B-C) ---


@dataclass(frozen=True)
class SitePilot:
    """A live pilot of a site as the Task Queue knows it: its DHT node, and its task if any."""

    pilot_id: int
    dht_address: str
    task_id: int | None = None
    attempt: int | None = None
    key: str | None = None  # hex: its key with the claimant's epoch (tq.client.pilotkeys)


@dataclass(frozen=True)
class Claim:
    """A pilot asks for its site's master role (the master is gone): it names the pilots with a
    lower id that it could not reach over the DHT."""

    pilot_id: int
    unreachable: tuple[int, ...] = ()


@dataclass(frozen=True)
class ClaimAnswer:
    """Granted (with a new epoch) or not; the master now, and, when granted, the site's live
    pilots with the tasks the Task Queue believes they run."""

    granted: bool
    reason: str = ""
    master: MasterInfo | None = None
    pilots: tuple[SitePilot, ...] = ()
    master_timeout: int = 60


@dataclass(frozen=True)
class SiteCompletion:
    """A worker's completion, reported by its master."""

    pilot_id: int
    completion: Completion


@dataclass(frozen=True)
class SiteSync:
    """The master's bulk call: completions, dead workers, tasks it could not deliver, and how
    many runnable tasks it wants (0: only a heartbeat)."""

    pilot_id: int  # the master
    epoch: int
    completions: tuple[SiteCompletion, ...] = ()
    dead: tuple[int, ...] = ()
    release: tuple[int, ...] = ()
    want: int = 0
    pilots: tuple[int, ...] = ()  # pilots the master asks about: their keys, or that they are gone
    # Seconds the master's rounds spent in each phase (wait, sync, broadcast...) since its last
    # sync that got through, for the counters; an older master sends none, an older Task Queue
    # ignores them.
    phases: tuple[tuple[str, float], ...] = ()
    # A long poll: nothing runnable for the site, the Task Queue holds its answer up to this
    # many seconds until tasks are (capped by the Task Queue; a newer call of the site ends it).
    wait: float = 0.0


@dataclass(frozen=True)
class TaskOffer:
    """A runnable task for a TaskList: what workers rank it by, and what the assignee runs."""

    task_id: int
    name: str
    command: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    max_runtime: int
    requirements: str = "true"
    rank: str = "0"
    request_cpus: int = 1
    request_memory: int = 0
    request_disk: int = 0
    attributes: Mapping[str, Scalar] = field(default_factory=dict)
    priority: int = 0
    # Offered to another site first (its share, ``sched.offers``): that site may take it soon,
    # so a master keeps it for no later round (``sched.stock``).
    shared: bool = False


@dataclass(frozen=True)
class PilotKey:
    """A pilot's key with the master's epoch (hex), for the master only."""

    pilot_id: int
    key: str


@dataclass(frozen=True)
class SiteSyncAnswer:
    """The runnable tasks of the site (at most ``want``), the fate of each completion (in
    order), and how many runnable tasks the site has in all."""

    tasks: tuple[TaskOffer, ...] = ()
    results: tuple[CompletionAnswer, ...] = ()
    queued: int = 0
    keys: tuple[PilotKey, ...] = ()  # of the asked-about pilots that are live pilots of the site
    gone: tuple[int, ...] = ()  # the asked-about pilots that are not (any more)
    # A long poll: the Task Queue saw the master (and its pilots) again when it answered, as
    # at a call (an older Task Queue did only when the poll came).
    seen: bool = False


@dataclass(frozen=True)
class Pair:
    """One assignment of a round: task to pilot."""

    task_id: int
    pilot_id: int


@dataclass(frozen=True)
class RoundReport:
    """What the master reports of a round for the counters (Delgado Peris 2014 §IV: the global
    rank): its method's sum of ranks and pilots served, and the other method's on the same
    matrix."""

    rank_sum: float = 0.0
    served: int = 0
    idle: int = 0
    offered: int = 0
    method: str = ""
    compared_sum: float = 0.0
    compared_served: int = 0


@dataclass(frozen=True)
class SiteAssign:
    """The master's round result, all at once; each task is taken atomically.

    ``completions``: a round that needed no ``sync`` (its tasks were the successors the Task
    Queue named, see ``Placed``) carries the completions that freed its workers here; they are
    recorded first, as ``sync`` records them, so the successors they release are queued and the
    workers free when the pairs are checked."""

    pilot_id: int
    epoch: int
    pairs: tuple[Pair, ...] = ()
    round: RoundReport = RoundReport()
    completions: tuple[SiteCompletion, ...] = ()


@dataclass(frozen=True)
class Placed:
    """A pair the Task Queue accepted: the attempt the worker's completion must name, and its
    successors: the waiting tasks this one's success makes runnable (every other input and
    predecessor already there, at this site or on the SE, or made by the tasks ``needs``
    names), which the master may offer its workers when the completion comes, without a
    ``sync``."""

    task_id: int
    pilot_id: int
    attempt: int
    successors: tuple[TaskOffer, ...] = ()
    # Other waiting tasks read its outputs (or wait for it) and need more than its success, or
    # may not run on this site's pilots: its completion may release them, which a ``sync``
    # shows.
    more: bool = False
    # For each successor, the other unfinished tasks it waits for (a merge's other inputs'
    # makers; empty: this task's success alone releases it); empty when every one is alone.
    needs: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class Refused:
    """A pair the Task Queue refused, and why (one short line): the task is no longer queued,
    the pilot is busy or not of the site, or they do not match (Requirements both ways,
    resources, life)."""

    task_id: int
    pilot_id: int
    reason: str


@dataclass(frozen=True)
class SiteAssignAnswer:
    accepted: tuple[Placed, ...] = ()
    refused: tuple[Refused, ...] = ()
    results: tuple[CompletionAnswer, ...] = ()  # of the call's completions, in order


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


def parse_assignment(data: Any) -> TaskAssignment | None:
    """The request's answer ``{"task": TaskAssignment | null}``: None when nothing fits now."""
    task = _object(data, "TaskResponse").get("task", _MISSING)
    if task is _MISSING:
        raise ValueError("TaskResponse: missing field 'task'")
    return None if task is None else parse(TaskAssignment, task)


_SCALARS = frozenset({str, int, float, bool, type(None)})
_FIELDS: dict[type[Any], tuple[str, ...]] = {}  # a dataclass's field names, in order


def to_json(message: Any) -> Any:
    """The wire form of a message: dataclasses as objects, tuples as lists, mappings as objects.

    The one encoder of the protocol: the client's requests and the service's answers (which encode
    one on every call, so each dataclass's fields are looked up once)."""
    kind = type(message)
    if kind in _SCALARS:
        return message
    names = _FIELDS.get(kind)
    if names is None and dataclasses.is_dataclass(message) and not isinstance(message, type):
        names = _FIELDS[kind] = tuple(item.name for item in dataclasses.fields(message))
    if names is not None:
        return {name: to_json(getattr(message, name)) for name in names}
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
_float = _typed((int, float), "a number")
_scalar = _typed((bool, int, float, str), "a boolean, number or string")
_READERS: dict[str, Callable[[Any], Any]] = {
    "int": _int,
    "str": _str,
    "bool": _typed((bool,), "a boolean"),
    "float": lambda value: float(_float(value)),
    "int | None": _optional(_int),
    "str | None": _optional(_str),
    "float | None": _optional(lambda value: float(_float(value))),
    "tuple[str, ...]": _tuple_of(_str),
    "tuple[str, ...] | None": _optional(_tuple_of(_str)),
    "tuple[int, ...]": _tuple_of(_int),
    "tuple[tuple[int, ...], ...]": _tuple_of(_tuple_of(_int)),
    "Mapping[str, Scalar]": _mapping_of(_scalar),
    "MasterInfo | None": _optional(_message(MasterInfo)),
    "Completion": _message(Completion),
    "CompletionAnswer": _message(CompletionAnswer),
    "TaskAssignment | None": _optional(_message(TaskAssignment)),
    "CompleteAndRequestAnswer | None": _optional(_message(CompleteAndRequestAnswer)),
    "tuple[PilotReport, ...]": _tuple_of(_message(PilotReport)),
    "tuple[ReportOutcome, ...]": _tuple_of(_message(ReportOutcome)),
    "RoundReport": _message(RoundReport),
    "tuple[SitePilot, ...]": _tuple_of(_message(SitePilot)),
    "tuple[PilotKey, ...]": _tuple_of(_message(PilotKey)),
    "tuple[SiteCompletion, ...]": _tuple_of(_message(SiteCompletion)),
    "tuple[TaskOffer, ...]": _tuple_of(_message(TaskOffer)),
    "tuple[CompletionAnswer, ...]": _tuple_of(_message(CompletionAnswer)),
    "tuple[Pair, ...]": _tuple_of(_message(Pair)),
    "tuple[Placed, ...]": _tuple_of(_message(Placed)),
    "tuple[Refused, ...]": _tuple_of(_message(Refused)),
    "tuple[Neighbour, ...]": _tuple_of(_message(Neighbour)),
    "tuple[WorkflowStatus, ...]": _tuple_of(_message(WorkflowStatus)),
    "Counts": _mapping_of(_int),
    "Mapping[str, Counts]": _mapping_of(_mapping_of(_int)),
}
