"""The wire format of the Task Queue API: what FastAPI validates and derives OpenAPI from.

An answer's shape is written once, as the protocol's dataclass (``tq.client.protocol``): the store
returns it, the client parses it, and the API names it as the call's ``response_model`` (pydantic
reads dataclasses) and sends it encoded once (``wire``), never validated a second time.  The
names below (``RegisterResponse`` ...) are those dataclasses.  A request's model is derived from
its dataclass too (``request_model``: fields, order, defaults), with a bound for every field from
``tq.client.limits`` that the service enforces before anything is stored; ``message`` turns the
validated request into the dataclass the store takes.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

from fastapi.responses import Response
from pydantic import AfterValidator, BaseModel, Field, create_model

from glidein_ext.tq.client import protocol as p
from glidein_ext.tq.client.limits import (
    BOUNDS,
    INT64_MAX,
    MAX_LFN_BYTES,
    MAX_NAME_CHARS,
    MAX_OFFER_WAIT,
    MAX_REPORTS,
    attribute_name_problem,
    expr_problem,
    scalar_problem,
    shorten,
    text_problem,
)
from glidein_ext.tq.client.protocol import TaskAssignment, to_json

Scalar = bool | int | float | str


def _refuse(check: Callable[[Any], str | None]) -> AfterValidator:
    """A pydantic validator from a ``tq.client.limits`` check: its problem becomes the 422's
    message."""

    def validate(value: Any) -> Any:
        problem = check(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    return AfterValidator(validate)


def _attributes(value: dict[str, Scalar]) -> str | None:
    for name, item in value.items():
        problem = attribute_name_problem(name) or scalar_problem(item)
        if problem is not None:
            return f"attribute {name[:40]!r}: {problem}"
    return None


REPORT_CHARS = 100_000


def _report(value: str) -> str | None:
    return text_problem(value, REPORT_CHARS)


def bounded(name: str) -> Any:
    """An integer field within ``tq.client.limits.BOUNDS[name]`` (in the OpenAPI description
    too)."""
    low, high = BOUNDS[name]
    return Field(ge=low, le=high)


Name = Annotated[str, Field(min_length=1), _refuse(lambda v: text_problem(v, MAX_NAME_CHARS))]
# A site's or a host's name: an identifier, as HTCondor and WLCG name them (GLIDEIN_Site and the
# CMS site names such as T2_US_Nebraska, DNS host names): ASCII letters, digits, '_', '-', '.',
# the characters the sites file and `pilot run --site` take.  Nothing else reaches the database,
# the terminals or the logs through them.
IDENTIFIER_PATTERN = r"^[A-Za-z0-9_.-]+$"
_IDENTIFIER = re.compile(IDENTIFIER_PATTERN)


def identifier_problem(value: object, max_chars: int = MAX_NAME_CHARS) -> str | None:
    """A site's or host's name: at most ``max_chars`` of ASCII letters, digits, '_', '-',
    '.'."""
    problem = text_problem(value, max_chars)
    if problem is not None:
        return problem
    assert isinstance(value, str)
    if not _IDENTIFIER.match(value):
        return f"{shorten(value)} is not a name: ASCII letters, digits, '_', '-' and '.' only"
    return None


Identifier = Annotated[str, Field(min_length=1), _refuse(identifier_problem)]
HostName = Annotated[str, Field(min_length=1), _refuse(lambda v: identifier_problem(v, 255))]
Text = Annotated[str, _refuse(text_problem)]
Expression = Annotated[str, _refuse(expr_problem)]
# What a pilot says it caches: texts the database can hold (the TQ only compares them with LFNs).
CachedName = Annotated[str, _refuse(lambda v: text_problem(v, 4 * MAX_LFN_BYTES))]
Attributes = Annotated[dict[str, Scalar], _refuse(_attributes)]


def request_model(name: str, kind: type[Any], checks: Mapping[str, Any]) -> type[BaseModel]:
    """A request's model, derived from the protocol's dataclass ``kind`` (one definition of the
    shape): its fields, in order, with their defaults; ``checks`` gives each field its bounded
    type (``tq.client.limits``).  Every field must have one: a field added to the dataclass
    without a bound is refused here, when the service starts, not accepted unbounded."""
    names = [item.name for item in dataclasses.fields(kind)]
    if set(names) != set(checks):
        missing, extra = sorted(set(names) - set(checks)), sorted(set(checks) - set(names))
        raise TypeError(f"{name}: no bound for {missing} / no such field {extra} in {kind}")
    fields: dict[str, Any] = {}
    for item in dataclasses.fields(kind):
        if item.default is not dataclasses.MISSING:
            fields[item.name] = (checks[item.name], item.default)
        elif item.default_factory is not dataclasses.MISSING:
            fields[item.name] = (checks[item.name], Field(default_factory=item.default_factory))
        else:
            fields[item.name] = (checks[item.name], ...)
    model: type[BaseModel] = create_model(name, __doc__=kind.__doc__, **fields)
    _MESSAGES[model] = kind
    return model


_MESSAGES: dict[type[BaseModel], type[Any]] = {}  # request model -> the protocol's dataclass
M = TypeVar("M")


def message(body: BaseModel, kind: type[M]) -> M:
    """The protocol's dataclass ``kind`` from a validated request (``request_model``), nested
    messages included: what the store takes."""
    if _MESSAGES.get(type(body)) is not kind:
        raise TypeError(f"{type(body).__name__} is not a request for {kind.__name__}")
    return cast(M, _message(body))


_PLAIN = frozenset({str, int, float, bool, type(None)})  # values taken as they are


def _message(value: Any) -> Any:
    if type(value) in _PLAIN:
        return value
    if isinstance(value, BaseModel):
        kind = _MESSAGES[type(value)]
        return kind(**{name: _message(getattr(value, name)) for name in type(value).model_fields})
    if isinstance(value, tuple) and value and isinstance(value[0], BaseModel):
        return tuple(_message(item) for item in value)
    return value


def _one_to(most: int, item: Any) -> Any:
    """A list of 1 to ``most`` ``item``s."""
    return Annotated[tuple[item, ...], Field(min_length=1, max_length=most)]


Limited = Annotated[float, Field(ge=0, le=1e11)]
_register = request_model(
    "RegisterRequest",
    p.Registration,  # Hasham 2011 §IV-E: Host, SE, TTL and resources; the pilot's ClassAd parts
    {
        "site": Identifier,
        "host": HostName,
        "se": Annotated[Text, Field(max_length=255)],
        "cpus": Annotated[int, bounded("cpus")],
        "memory": Annotated[int, bounded("memory"), Field(description="MB")],
        "disk": Annotated[int, bounded("disk"), Field(description="MB")],
        "ttl": Annotated[
            int | None, bounded("ttl"), Field(description="seconds of life left; null: no end")
        ],
        "attributes": Attributes,
        "requirements": Expression,
        "rank": Expression,
        "cache_dir": Annotated[
            Text, Field(description="where other pilots on the host find its cache")
        ],
        "cached": tuple[CachedName, ...],
        "batch_id": Annotated[
            Name | None, Field(description="the batch job that started the pilot")
        ],
        "dht_address": Annotated[
            Annotated[Text, Field(max_length=300)] | None,
            Field(description="host:port of its site-DHT node (Delgado Peris 2014)"),
        ],
        "peer_url": Annotated[
            Annotated[Text, Field(max_length=300)] | None,
            Field(description="its peer file server, http://host:port"),
        ],
    },
)
_complete = request_model(
    "CompleteRequest",
    p.Completion,
    {
        "task_id": Annotated[int, bounded("task_id")],
        "attempt": Annotated[int, bounded("attempt")],
        "exit_code": Annotated[int, bounded("exit_code")],
        "outputs": Annotated[
            tuple[CachedName, ...], Field(description="declared outputs it produced")
        ],
        "report": Annotated[str, Field(max_length=REPORT_CHARS), _refuse(_report)],
        # the run's counters: when the pilot began and ended the task, where its inputs came from
        "started_at": Limited | None,
        "ended_at": Limited | None,
        "origins": Annotated[
            dict[Annotated[str, Field(max_length=16)], Annotated[int, Field(ge=0, le=10**6)]],
            Field(max_length=8, description="inputs by origin"),
        ],
    },
)

# What a pilot says it caches, with a task request and a heartbeat: a JSON array (a list, as the
# service takes it) of names, or null.
Cached = list[CachedName] | None
_request = request_model(
    "TaskRequest",
    p.TaskRequest,
    {"cached": Cached, "wait": Annotated[float, Field(ge=0, le=MAX_OFFER_WAIT)]},
)
_heartbeat = request_model("HeartbeatRequest", p.Heartbeat, {"cached": Cached})
# A busy pilot's one call per task: a completion and a request's cache list.
_complete_and_request = request_model(
    "CompleteAndRequestRequest",
    p.CompleteAndRequest,
    {"completion": _complete, "cached": Cached},
)
# The reports of several pilots of one process, sent together: each a pilot's complete-and-request.
_pilot_report = request_model(
    "PilotReport",
    p.PilotReport,
    {
        "pilot_id": Annotated[int, Field(ge=1, le=INT64_MAX)],
        "completion": _complete,
        "cached": Cached,
    },
)
_reports = request_model(
    "ReportsRequest",
    p.Reports,
    {"reports": _one_to(MAX_REPORTS, _pilot_report)},
)

if TYPE_CHECKING:  # mypy takes a derived model for what it is: a pydantic model
    RegisterRequest = BaseModel
    CompleteRequest = BaseModel
    TaskRequest = BaseModel
    HeartbeatRequest = BaseModel
    CompleteAndRequestRequest = BaseModel
    ReportsRequest = BaseModel
else:
    RegisterRequest, CompleteRequest = _register, _complete
    TaskRequest, HeartbeatRequest = _request, _heartbeat
    CompleteAndRequestRequest = _complete_and_request
    ReportsRequest = _reports


class TaskResponse(BaseModel):
    """A request's answer: the task assigned, or null when nothing fits now."""

    task: TaskAssignment | None


# The pilots' answers: the protocol's dataclasses (one definition of each shape; the other
# routes name theirs from ``tq.client.protocol`` directly).
RegisterResponse = p.RegisterAnswer
HeartbeatResponse = p.HeartbeatAnswer
CompleteResponse = p.CompletionAnswer
CompleteAndRequestResponse = p.CompleteAndRequestAnswer


def wire(message: Any) -> Response:
    """An answer: the protocol's message as JSON, encoded once (the call's ``response_model``
    describes it in OpenAPI; FastAPI does not validate and encode it again)."""
    body = _ENCODE(to_json(message))
    return Response(body.encode(), media_type="application/json")


_ENCODE = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


class ErrorResponse(BaseModel):
    detail: str
