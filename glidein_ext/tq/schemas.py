"""The wire format of the Task Queue API (pydantic models; FastAPI derives OpenAPI from them).

The same shapes as the protocol's dataclasses (``tq.protocol``), which the store returns and the
client parses; the API builds these from them.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

Scalar = bool | int | float | str


class RegisterRequest(BaseModel):
    """Seed IV-E: Host, SE, TTL and resources; plus the pilot's own ClassAd parts."""

    site: str = Field(min_length=1, max_length=200)
    host: str = Field(min_length=1, max_length=255)
    se: str = Field(default="", max_length=255)
    cpus: int = Field(default=1, ge=1)
    memory: int = Field(default=0, ge=0, description="MB")
    disk: int = Field(default=0, ge=0, description="MB")
    ttl: int | None = Field(default=None, ge=0, description="seconds of life left; null: no end")
    attributes: dict[str, Scalar] = Field(default_factory=dict)
    requirements: str = "true"
    rank: str = "0"
    cache_dir: str = Field(default="", description="where other pilots on the host find its cache")
    cached: list[str] = Field(default_factory=list)
    batch_id: str | None = Field(default=None, description="the batch job that started the pilot")


class Neighbour(BaseModel):
    pilot_id: int
    cache_dir: str


class RegisterResponse(BaseModel):
    pilot_id: int
    heartbeat_interval: int
    cache_mode: str
    others: list[Neighbour]
    # Room for the site DHT (seed 000): filled in by the distributed-scheduling issue.
    dht_id: str | None = None
    site_contacts: list[str] = Field(default_factory=list)
    site_key: str | None = None


class TaskRequest(BaseModel):
    """Centralized mode: the pilot's cached files with each request (seed IV-E)."""

    cached: list[str] | None = None


class Assignment(BaseModel):
    task_id: int
    attempt: int
    name: str
    command: str
    inputs: list[str]
    outputs: list[str]
    max_runtime: int
    cached_inputs: int


class TaskResponse(BaseModel):
    task: Assignment | None


class HeartbeatRequest(BaseModel):
    cached: list[str] | None = None


class HeartbeatResponse(BaseModel):
    others: list[Neighbour]


class CompleteRequest(BaseModel):
    task_id: int
    attempt: int
    exit_code: int
    outputs: list[str] = Field(default_factory=list, description="declared outputs it produced")
    report: str = Field(default="", max_length=100_000)


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
