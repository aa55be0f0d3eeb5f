"""The wire format of the Task Queue API (pydantic models; FastAPI derives OpenAPI from them).

The same shapes as the protocol's dataclasses (``tq.client.protocol``), which the store returns and
the client parses; the API builds these from them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field

from glidein_ext.tq.client.limits import (
    BOUNDS,
    MAX_LFN_BYTES,
    MAX_NAME_CHARS,
    attribute_name_problem,
    expr_problem,
    scalar_problem,
    text_problem,
)

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
Text = Annotated[str, _refuse(text_problem)]
Expression = Annotated[str, _refuse(expr_problem)]
# What a pilot says it caches: texts the database can hold (the TQ only compares them with LFNs).
CachedName = Annotated[str, _refuse(lambda v: text_problem(v, 4 * MAX_LFN_BYTES))]
Attributes = Annotated[dict[str, Scalar], _refuse(_attributes)]


class RegisterRequest(BaseModel):
    """Seed IV-E: Host, SE, TTL and resources; plus the pilot's own ClassAd parts."""

    site: Name
    host: Annotated[Name, Field(max_length=255)]
    se: Annotated[Text, Field(default="", max_length=255)]
    cpus: Annotated[int, bounded("cpus")] = 1
    memory: Annotated[int, bounded("memory"), Field(description="MB")] = 0
    disk: Annotated[int, bounded("disk"), Field(description="MB")] = 0
    ttl: Annotated[int | None, bounded("ttl")] = Field(
        default=None, description="seconds of life left; null: no end"
    )
    attributes: Attributes = Field(default_factory=dict)
    requirements: Expression = "true"
    rank: Expression = "0"
    cache_dir: Text = Field(default="", description="where other pilots on the host find its cache")
    cached: list[CachedName] = Field(default_factory=list)
    batch_id: Name | None = Field(default=None, description="the batch job that started the pilot")
    dht_address: Annotated[Text, Field(max_length=300)] | None = Field(
        default=None, description="host:port of its site-DHT node (Delgado Peris 2014)"
    )
    peer_url: Annotated[Text, Field(max_length=300)] | None = Field(
        default=None, description="its peer file server, http://host:port"
    )


class Neighbour(BaseModel):
    pilot_id: int
    cache_dir: str


class MasterInfo(BaseModel):
    """A distributed site's master: pilot, DHT address, epoch (Delgado Peris 2014 §III.B)."""

    pilot_id: int
    dht_address: str
    epoch: int


class RegisterResponse(BaseModel):
    pilot_id: int
    heartbeat_interval: int
    cache_mode: str
    others: list[Neighbour]
    # The site DHT (Delgado Peris 2014): its id, live pilots to join through, the site's key (hex).
    dht_id: str | None = None
    site_contacts: list[str] = Field(default_factory=list)
    site_key: str | None = None
    architecture: str = "pre-dht"
    master: MasterInfo | None = None
    master_timeout: int = 10


class TaskRequest(BaseModel):
    """Centralized mode: the pilot's cached files with each request (Hasham 2011 §IV-E)."""

    cached: list[CachedName] | None = None
    # Seed 002 4.2.3 (courier): nothing fits, keep the request open this many seconds as a
    # standing offer an urgent task is pushed to (capped by the setting offer_max_wait).
    wait: float = Field(default=0.0, ge=0, le=3600)


class Assignment(BaseModel):
    task_id: int
    attempt: int
    name: str
    command: str
    inputs: list[str]
    outputs: list[str]
    max_runtime: int
    cached_inputs: int
    request_cpus: int = 1
    request_memory: int = 0
    request_disk: int = 0


class TaskResponse(BaseModel):
    task: Assignment | None


class HeartbeatRequest(BaseModel):
    cached: list[CachedName] | None = None


class HeartbeatResponse(BaseModel):
    others: list[Neighbour]


class CompleteRequest(BaseModel):
    task_id: Annotated[int, bounded("task_id")]
    attempt: Annotated[int, bounded("attempt")]
    exit_code: Annotated[int, bounded("exit_code")]
    outputs: list[CachedName] = Field(
        default_factory=list, description="declared outputs it produced"
    )
    report: Annotated[str, Field(max_length=REPORT_CHARS), _refuse(_report)] = ""
    # For the run's counters: when the pilot began and ended the task, where its inputs came from.
    started_at: Annotated[float, Field(ge=0, le=1e11)] | None = None
    ended_at: Annotated[float, Field(ge=0, le=1e11)] | None = None
    origins: dict[Annotated[str, Field(max_length=16)], Annotated[int, Field(ge=0, le=10**6)]] = (
        Field(default_factory=dict, max_length=8, description="inputs by origin")
    )


class CompleteResponse(BaseModel):
    accepted: bool
    duplicate: bool
    state: str


class SubmitResponse(BaseModel):
    workflow_id: int
    tasks: int


class WorkflowStatus(BaseModel):
    id: int
    name: str
    submitted_at: float
    tasks: dict[str, int] = Field(description="tasks by state, every state listed")


class StatusResponse(BaseModel):
    workflows: list[WorkflowStatus]
    pilots: dict[str, dict[str, int]] = Field(description="site -> pilot state -> number")
    completions: int
    queued_groups: int


class ErrorResponse(BaseModel):
    detail: str
