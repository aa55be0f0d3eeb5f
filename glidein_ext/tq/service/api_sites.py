"""The distributed architecture's calls (Delgado Peris 2014 §III.B) and the run's counters, mounted
on the Task Queue API by ``api.create_app`` (``install``).

| call | token | body → answer |
| --- | --- | --- |
| ``POST /api/v1/sites/{site}/master`` | pilot | ``Claim`` → ``ClaimAnswer`` |
| ``POST /api/v1/sites/{site}/sync`` | pilot | ``SiteSync`` → ``SiteSyncAnswer`` (409: stale) |
| ``POST /api/v1/sites/{site}/assign`` | pilot | ``SiteAssign`` → ``SiteAssignAnswer`` (409) |
| ``GET /api/v1/counters`` | operator | the run's counters (``tq.service.counters``) |

Every pilot request is counted by kind as it arrives (a middleware), whatever its answer.
A master's call with a credential must be of the site's credential and name one of its own pilots
(``tq.service.auth``: 403, nothing changed); the epoch rule (409) comes after.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import FastAPI, Path, Request
from fastapi.params import Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.types import ASGIApp, Receive, Scope, Send

from glidein_ext.errors import StaleMasterError, TaskQueueForbidden, TaskQueueNotFound
from glidein_ext.tq.client.limits import INT64_MAX, MAX_NAME_CHARS
from glidein_ext.tq.client.protocol import (
    Claim,
    Completion,
    Pair,
    RoundReport,
    SiteAssign,
    SiteCompletion,
    SiteSync,
    to_json,
)
from glidein_ext.tq.service.api_auth import Pilot
from glidein_ext.tq.service.auth import Principal, check_pilot, check_site
from glidein_ext.tq.service.counters import RunCounters, request_kind
from glidein_ext.tq.service.schemas import CompleteRequest
from glidein_ext.tq.service.store import Store

API = "/api/v1"
MAX_BULK = 20_000  # completions, pilots, tasks or pairs in one master call
SiteName = Annotated[str, Path(min_length=1, max_length=MAX_NAME_CHARS)]
Id = Annotated[int, Field(ge=1, le=INT64_MAX)]


class ClaimRequest(BaseModel):
    """A pilot asks for its site's master role; ``unreachable``: lower-id pilots it could not
    reach over the DHT."""

    pilot_id: Id
    unreachable: list[Id] = Field(default_factory=list, max_length=MAX_BULK)


class SiteCompletionRequest(BaseModel):
    pilot_id: Id
    completion: CompleteRequest


class SyncRequest(BaseModel):
    """The master's bulk call: completions, dead workers, undelivered tasks, tasks wanted."""

    pilot_id: Id
    epoch: Annotated[int, Field(ge=0, le=INT64_MAX)]
    completions: list[SiteCompletionRequest] = Field(default_factory=list, max_length=MAX_BULK)
    dead: list[Id] = Field(default_factory=list, max_length=MAX_BULK)
    release: list[Id] = Field(default_factory=list, max_length=MAX_BULK)
    want: Annotated[int, Field(ge=0, le=MAX_BULK)] = 0


class PairRequest(BaseModel):
    task_id: Id
    pilot_id: Id


class RoundRequest(BaseModel):
    rank_sum: Annotated[float, Field(ge=-1e15, le=1e15)] = 0.0
    served: Annotated[int, Field(ge=0, le=MAX_BULK)] = 0
    idle: Annotated[int, Field(ge=0, le=10**7)] = 0
    offered: Annotated[int, Field(ge=0, le=10**7)] = 0
    method: Annotated[str, Field(max_length=20)] = ""
    compared_sum: Annotated[float, Field(ge=-1e15, le=1e15)] = 0.0
    compared_served: Annotated[int, Field(ge=0, le=MAX_BULK)] = 0


class AssignRequest(BaseModel):
    """The master's round: its pairs, and the round's report for the counters."""

    pilot_id: Id
    epoch: Annotated[int, Field(ge=0, le=INT64_MAX)]
    pairs: list[PairRequest] = Field(default_factory=list, max_length=MAX_BULK)
    round: RoundRequest = Field(default_factory=RoundRequest)


def _completion(body: CompleteRequest) -> Completion:
    data = body.model_dump()
    return Completion(**{**data, "outputs": tuple(body.outputs)})


class RequestCounter:
    """ASGI middleware: counts every pilot request by kind as it arrives
    (``tq.service.counters``)."""

    def __init__(self, app: ASGIApp, counters: RunCounters) -> None:
        self.app = app
        self.counters = counters

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            kind = request_kind(scope["method"], scope["path"])
            if kind is not None:
                self.counters.on_request(kind)
        await self.app(scope, receive, send)


def acts_for(store: Store, who: Principal, site: str, pilot_id: int) -> None:
    """A master's call: the caller may act for ``site`` as pilot ``pilot_id`` (``tq.service.auth``).
    With the shared token an unknown pilot is left to the store (it answers as before)."""
    check_site(who, site)
    try:
        owner = store.pilot_owner(pilot_id)
    except TaskQueueNotFound:
        if who.credential_id is None:
            return
        raise TaskQueueForbidden(f"pilot {pilot_id} is not a pilot of {who.describe()}") from None
    check_pilot(who, pilot_id, owner)


def install(app: FastAPI, store: Store, operator: Sequence[Depends]) -> None:
    """Add the master's calls, the counters and the request-counting middleware to ``app``."""

    @app.exception_handler(StaleMasterError)
    async def _stale(_request: Request, exc: StaleMasterError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)[:500]}, status_code=409)

    app.add_middleware(RequestCounter, counters=store.counters)

    conflict: dict[int | str, dict[str, Any]] = {409: {"description": "a stale master"}}

    forbidden: dict[int | str, dict[str, Any]] = {403: {"description": "not this caller's"}}

    @app.post(f"{API}/sites/{{site}}/master", responses=forbidden)
    async def claim(site: SiteName, body: ClaimRequest, who: Pilot) -> dict[str, Any]:
        """Claim the site's master role (Delgado Peris 2014 §III.B): granted with a new epoch only
        if the master is gone and the claimant is the lowest-id live pilot."""
        acts_for(store, who, site, body.pilot_id)
        answer = store.claim_master(site, Claim(body.pilot_id, tuple(body.unreachable)))
        return dict(to_json(answer))

    @app.post(f"{API}/sites/{{site}}/sync", responses={**conflict, **forbidden})
    async def sync(site: SiteName, body: SyncRequest, who: Pilot) -> dict[str, Any]:
        """The master's bulk call: completions, dead workers, undelivered tasks, runnable
        tasks of the site (``want``); also the site's heartbeat."""
        acts_for(store, who, site, body.pilot_id)
        call = SiteSync(
            pilot_id=body.pilot_id,
            epoch=body.epoch,
            completions=tuple(
                SiteCompletion(item.pilot_id, _completion(item.completion))
                for item in body.completions
            ),
            dead=tuple(body.dead),
            release=tuple(body.release),
            want=body.want,
        )
        return dict(to_json(store.sync(site, call)))

    @app.post(f"{API}/sites/{{site}}/assign", responses={**conflict, **forbidden})
    async def assign(site: SiteName, body: AssignRequest, who: Pilot) -> dict[str, Any]:
        """The master's assignments of a round; each task taken atomically."""
        acts_for(store, who, site, body.pilot_id)
        call = SiteAssign(
            pilot_id=body.pilot_id,
            epoch=body.epoch,
            pairs=tuple(Pair(p.task_id, p.pilot_id) for p in body.pairs),
            round=RoundReport(**body.round.model_dump()),
        )
        return dict(to_json(store.assign(site, call)))

    @app.get(f"{API}/counters", dependencies=list(operator))
    def counters() -> dict[str, Any]:
        """The run's counters, overall and per workflow (docs/architectures.md)."""
        return store.counters.snapshot(time.time())
