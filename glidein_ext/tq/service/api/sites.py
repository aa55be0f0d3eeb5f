"""The distributed architecture's calls (Delgado Peris 2014 §III.B) and the run's counters, mounted
on the Task Queue API by ``app.create_app`` (``install``).

| call | token | body → answer |
| --- | --- | --- |
| ``POST /api/v1/sites/{site}/master`` | pilot | ``Claim`` → ``ClaimAnswer`` |
| ``POST /api/v1/sites/{site}/sync`` | pilot | ``SiteSync`` → ``SiteSyncAnswer`` (409: stale) |
| ``POST /api/v1/sites/{site}/assign`` | pilot | ``SiteAssign`` → ``SiteAssignAnswer`` (409) |
| ``GET /api/v1/counters`` | operator | the run's counters (``tq.service.counters``) |

A ``sync`` with ``wait`` is a long poll (``tq.service.site_waits``).
Every pilot request is counted by kind as it arrives (a middleware), whatever its answer.
Before a master's ``sync`` (with ``want``) or ``assign`` reaches the store, the pairs of its
site's pilots with costly expressions are settled in the costly expressions' worker
(``tq.service.matching.costly``, one request's budget for all of them): the store never
evaluates them under its lock (``tq.service.store.offers``).
A master's call with a credential must be of the site's credential and name one of its own pilots
(``tq.service.api.auth``: 403, nothing changed); the epoch rule (409) comes after.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Path
from fastapi.params import Depends
from fastapi.responses import Response
from fastapi.types import DecoratedCallable
from pydantic import BaseModel, Field
from starlette.types import ASGIApp, Receive, Scope, Send

from glidein_ext.errors import StaleMasterError, TaskQueueForbidden, TaskQueueNotFound
from glidein_ext.tq.client.limits import INT64_MAX, MAX_NAME_CHARS
from glidein_ext.tq.client.protocol import (
    API,
    Claim,
    ClaimAnswer,
    Pair,
    RoundReport,
    SiteAssign,
    SiteAssignAnswer,
    SiteCompletion,
    SiteSync,
    SiteSyncAnswer,
)
from glidein_ext.tq.service.api.access import Pilot
from glidein_ext.tq.service.api.auth import Principal, check_pilot, check_site
from glidein_ext.tq.service.api.fastpath import TaskQueueApp
from glidein_ext.tq.service.api.schemas import (
    IDENTIFIER_PATTERN,
    CompleteRequest,
    message,
    request_model,
    wire,
)
from glidein_ext.tq.service.api.unblocked import unblocked
from glidein_ext.tq.service.counters import RunCounters, request_kind
from glidein_ext.tq.service.matching.costly import CostlyEvaluator
from glidein_ext.tq.service.site_waits import MAX_WAIT, SiteWaits
from glidein_ext.tq.service.store import Store

MAX_BULK = 20_000  # completions, pilots, tasks or pairs in one master call
SiteName = Annotated[str, Path(min_length=1, max_length=MAX_NAME_CHARS, pattern=IDENTIFIER_PATTERN)]
Id = Annotated[int, Field(ge=1, le=INT64_MAX)]


Epoch = Annotated[int, Field(ge=0, le=INT64_MAX)]
MAX_PHASES = 16  # a master's round phases in one sync
Phase = Annotated[str, Field(min_length=1, max_length=20, pattern=r"^[a-z_]+$")]
Seconds = Annotated[float, Field(ge=0, le=1e9)]


def _bulk(item: Any) -> Any:
    """A list of at most MAX_BULK ``item``s."""
    return Annotated[tuple[item, ...], Field(max_length=MAX_BULK)]


# The master's requests, derived from the protocol's dataclasses (``schemas.request_model``).
_claim = request_model(
    "ClaimRequest",
    Claim,  # ``unreachable``: lower-id pilots it could not reach over the DHT
    {"pilot_id": Id, "unreachable": _bulk(Id)},
)
_site_completion = request_model(
    "SiteCompletionRequest", SiteCompletion, {"pilot_id": Id, "completion": CompleteRequest}
)
_sync = request_model(
    "SyncRequest",
    SiteSync,
    {
        "pilot_id": Id,
        "epoch": Epoch,
        "completions": _bulk(_site_completion),
        "dead": _bulk(Id),
        "release": _bulk(Id),
        "want": Annotated[int, Field(ge=0, le=MAX_BULK)],
        "pilots": _bulk(Id),  # keys asked, or gone
        "phases": Annotated[tuple[tuple[Phase, Seconds], ...], Field(max_length=MAX_PHASES)],
        "wait": Annotated[float, Field(ge=0, le=MAX_WAIT)],
    },
)
_pair = request_model("PairRequest", Pair, {"task_id": Id, "pilot_id": Id})
_round = request_model(
    "RoundRequest",
    RoundReport,
    {
        "rank_sum": Annotated[float, Field(ge=-1e15, le=1e15)],
        "served": Annotated[int, Field(ge=0, le=MAX_BULK)],
        "idle": Annotated[int, Field(ge=0, le=10**7)],
        "offered": Annotated[int, Field(ge=0, le=10**7)],
        "method": Annotated[str, Field(max_length=20)],
        "compared_sum": Annotated[float, Field(ge=-1e15, le=1e15)],
        "compared_served": Annotated[int, Field(ge=0, le=MAX_BULK)],
    },
)
_assign = request_model(
    "AssignRequest",
    SiteAssign,  # the master's round: its pairs, and the round's report for the counters
    {
        "pilot_id": Id,
        "epoch": Epoch,
        "pairs": _bulk(_pair),
        "round": _round,
        "completions": _bulk(_site_completion),  # a round without a sync carries them here
    },
)
if TYPE_CHECKING:  # mypy takes a derived model for what it is: a pydantic model
    ClaimRequest = BaseModel
    SyncRequest = BaseModel
    AssignRequest = BaseModel
else:
    ClaimRequest, SyncRequest, AssignRequest = _claim, _sync, _assign


class RequestCounter:
    """ASGI middleware: counts every pilot request by kind as it arrives
    (``tq.service.counters``); ``count`` counts one the fast path serves
    (``tq.service.api.fastpath``), which never crosses the middleware."""

    def __init__(self, app: ASGIApp, counters: RunCounters) -> None:
        self.app = app
        self.counters = counters

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            count(self.counters, scope["method"], scope["path"])
        await self.app(scope, receive, send)


def count(counters: RunCounters, method: str, path: str) -> None:
    """A pilot's request of this method and path counted by its kind; anything else not."""
    kind = request_kind(method, path)
    if kind is not None:
        counters.on_request(kind)


def acts_for(
    owner_of: Callable[[int], int | None], who: Principal, site: str, pilot_id: int
) -> None:
    """A master's call: the caller may act for ``site`` as pilot ``pilot_id``
    (``tq.service.api.auth``; ``owner_of``: the pilot's credential, remembered by the app).
    With the shared token an unknown pilot is left to the store (it answers as before)."""
    check_site(who, site)
    try:
        owner = owner_of(pilot_id)
    except TaskQueueNotFound:
        if who.credential_id is None:
            return
        raise TaskQueueForbidden(f"pilot {pilot_id} is not a pilot of {who.describe()}") from None
    check_pilot(who, pilot_id, owner)


def install(
    app: TaskQueueApp,
    store: Store,
    operator: Sequence[Depends],
    costly: CostlyEvaluator,
    owner_of: Callable[[int], int | None],
) -> None:
    """Add the master's calls, the counters and the request-counting middleware to ``app``;
    ``costly`` settles the pairs with costly expressions of the pilots a master's call matches
    (``tq.service.matching.costly``), before the call reaches the store; ``owner_of``: a
    pilot's credential (``acts_for``)."""

    app.add_middleware(RequestCounter, counters=store.counters)
    if app.fast_path is not None:
        app.fast_path.count_arrivals(functools.partial(count, store.counters))
    waits = app.state.site_waits = SiteWaits()  # the masters' long polls
    store.matcher.on_queued = waits.queued

    conflict: dict[int | str, dict[str, Any]] = {409: {"description": "a stale master"}}

    forbidden: dict[int | str, dict[str, Any]] = {403: {"description": "not this caller's"}}

    def master_call(call: str, answer: type) -> Callable[[DecoratedCallable], DecoratedCallable]:
        """The route of the site's master's ``call``, which a stale master's epoch fails."""
        return app.post(
            f"{API}/sites/{{site}}/{call}",
            responses={**conflict, **forbidden},
            response_model=answer,
        )

    @app.post(f"{API}/sites/{{site}}/master", responses=forbidden, response_model=ClaimAnswer)
    async def claim(site: SiteName, body: ClaimRequest, who: Pilot) -> Response:
        """Claim the site's master role (Delgado Peris 2014 §III.B): granted with a new epoch only
        if the master is gone and the claimant is the lowest-id live pilot."""
        claim = message(body, Claim)
        acts_for(owner_of, who, site, claim.pilot_id)
        answer = await unblocked(store, store.claim_master, site, claim)
        return wire(answer)

    @master_call("sync", SiteSyncAnswer)
    async def sync(site: SiteName, body: SyncRequest, who: Pilot) -> Response:
        """The master's bulk call: completions, dead workers, undelivered tasks, runnable
        tasks of the site (``want``); also the site's heartbeat."""
        call = message(body, SiteSync)
        acts_for(owner_of, who, site, call.pilot_id)
        number, seen = waits.begin(site), waits.generation
        if call.want:
            await costly.settle_site(site, store.clock())
        answer = await unblocked(store, store.sync, site, call)
        deadline = time.monotonic() + call.wait
        waited = False
        while call.wait and not answer.queued and (left := deadline - time.monotonic()) > 0:
            waited = True
            if not await waits.wait(site, number, left, seen):
                break
            seen = waits.generation
            await costly.settle_site(site, store.clock())
            tasks, queued = await unblocked(store, store.offers, site, call.want)
            answer = dataclasses.replace(answer, tasks=tasks, queued=queued)
        # The master (and its pilots) seen again: the poll counts as a call -- unless a newer
        # call of the site ended it (that one counts), or its pilot is no more the master.
        if waited and waits.newest(site, number):
            with contextlib.suppress(StaleMasterError):
                await unblocked(store, store.seen, site, call.pilot_id, call.epoch)
                answer = dataclasses.replace(answer, seen=True)
        return wire(answer)

    @master_call("assign", SiteAssignAnswer)
    async def assign(site: SiteName, body: AssignRequest, who: Pilot) -> Response:
        """The master's assignments of a round; each task taken atomically."""
        call = message(body, SiteAssign)
        acts_for(owner_of, who, site, call.pilot_id)
        waits.begin(site)
        pilots = dict.fromkeys(pair.pilot_id for pair in call.pairs)
        await costly.settle_pilots(pilots, store.clock())
        return wire(await unblocked(store, store.assign, site, call))

    @app.get(f"{API}/counters", dependencies=list(operator))
    def counters() -> dict[str, Any]:
        """The run's counters, overall and per workflow (docs/architectures.md)."""
        return store.counters.snapshot(time.time())
