"""The Task Queue HTTP API (FastAPI): the pilot protocol of Hasham 2011 §IV and the operators'
calls.

Pilots and operators each carry their own bearer token; a call without a valid one is refused
before its body is read, and bodies are bounded (``tq.service.api.guard``).  A pilot's token is the
shared pilot token or its own credential; what each may do (its site, its own pilots) is
``tq.service.api.auth``,
checked here before the store is called: a refusal (403) changes nothing.  Everything a call
carries is checked before anything is stored (``tq.service.api.schemas`` and ``tq.workflow``, by
``tq.client.limits``).  Errors of the store become HTTP answers here: unknown or gone pilots
404, bad requests 422 (a body nested too deeply too), other TQ failures 503.  ``/healthz`` says
whether
the service's background loops pass (503 when one is stuck) and which database rows it could not
load.  The store answers with the protocol's dataclasses (``tq.client.protocol``); the pydantic
schemas built from them here give the same JSON and the OpenAPI description.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.types import DecoratedCallable
from starlette.concurrency import run_in_threadpool

from glidein_ext.errors import TaskQueueError, WorkflowError, tq_http_status
from glidein_ext.tq.client import protocol as p
from glidein_ext.tq.client.limits import INT64_MAX
from glidein_ext.tq.client.protocol import (
    API,
    CompleteAndRequest,
    Completion,
    Heartbeat,
    Registration,
    TaskAssignment,
    TaskRequest,
)
from glidein_ext.tq.service.api import schemas as s
from glidein_ext.tq.service.api.access import Pilot, operator_access
from glidein_ext.tq.service.api.auth import Authenticator, Principal, check_pilot, check_register
from glidein_ext.tq.service.api.credentials import install as install_credentials
from glidein_ext.tq.service.api.fastpath import FastCall, PilotFastPath, TaskQueueApp
from glidein_ext.tq.service.api.guard import RequestGuard
from glidein_ext.tq.service.api.large_submit import LARGE, SubmissionParser, workflow_of
from glidein_ext.tq.service.api.sites import install as install_sites
from glidein_ext.tq.service.api.unblocked import unblocked
from glidein_ext.tq.service.api.wlcg_tokens import load_verifier
from glidein_ext.tq.service.cpu_bound import cpu_bound_job
from glidein_ext.tq.service.loops import WatchedLoop
from glidein_ext.tq.service.matching.costly import CostlyEvaluator
from glidein_ext.tq.service.pool.courier import OfferBoard
from glidein_ext.tq.service.settings import TqSettings
from glidein_ext.tq.service.store import Store
from glidein_ext.tq.workflow import WorkflowDef, parse_workflow

PilotId = Annotated[int, Path(ge=1, le=INT64_MAX)]


def _one_line(text: str, limit: int = 500) -> str:
    """An error's text as the answer carries it: one line, bounded, encodable."""
    flat = " ".join(text.split())[:limit]
    return flat.encode("utf-8", "backslashreplace").decode("utf-8")


def error_answer(exc: Exception) -> JSONResponse:
    """A TQ error (or a body nested too deeply) as the API answers it (also on the pilots' fast
    path, ``tq.service.api.fastpath``)."""
    if isinstance(exc, RecursionError):
        return JSONResponse({"detail": "the request body is nested too deeply"}, status_code=422)
    if isinstance(exc, TaskQueueError):
        return JSONResponse({"detail": _one_line(str(exc))}, status_code=tq_http_status(exc))
    raise exc


def _translate_errors(app: FastAPI) -> None:
    """The store's errors as HTTP answers, one line each: the status of
    ``glidein_ext.errors.TQ_HTTP_STATUS`` (403, 401, 404, 409, 422, else 503)."""

    @app.exception_handler(TaskQueueError)
    async def _translate(_request: Request, exc: TaskQueueError) -> JSONResponse:
        return error_answer(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        """One line per refused field (the first three), never the value itself."""
        found = [
            f"{'.'.join(str(part)[:40] for part in error['loc'])}: {error['msg']}"
            for error in exc.errors()[:3]
        ]
        return JSONResponse({"detail": _one_line("; ".join(found))}, status_code=422)

    @app.exception_handler(RecursionError)
    async def _too_deep(_request: Request, exc: RecursionError) -> JSONResponse:
        return error_answer(exc)


async def _stand(board: OfferBoard, pilot_id: int, wait: float) -> bool:
    """Lee 2003 §4.2.3: the pilot's request stands as an offer for up to ``wait`` s; True if an
    urgent task was pushed to it (it should take again), False when the wait ended."""
    if board.closed:  # the server stops
        return False
    loop = asyncio.get_running_loop()
    pushed = asyncio.Event()

    def wake() -> None:  # from a submission's worker thread, or this loop
        loop.call_soon_threadsafe(pushed.set)

    offer = board.offer(pilot_id, time.time(), wake)
    try:
        await asyncio.wait_for(pushed.wait(), wait)
    except TimeoutError:
        return False
    finally:
        board.withdraw(offer)
    return not board.closed


async def _take(
    store: Store, costly: CostlyEvaluator, pilot_id: int, cached: Sequence[str] | None
) -> TaskAssignment | None:
    """The pilot's costly pairs settled away from the event loop (``tq.service.matching.costly``),
    then its best task taken."""
    await costly.settle(pilot_id, store.clock())
    return await unblocked(store, store.request, pilot_id, cached)


# The submission's body, as FastAPI described it when it decoded the body itself (a JSON object).
_WORKFLOW_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"type": "object", "title": "Body"}}},
    }
}


def _submit_now(store: Store, board: OfferBoard, raw: bytes) -> p.SubmitAnswer:
    """A submission decoded, parsed, validated and stored in the calling thread (a worker
    thread: the store's transaction under its lock), as FastAPI would refuse a body that is not
    a JSON object (422).  A large one is parsed in a worker process instead
    (``tq.service.api.large_submit``)."""
    try:
        body = json.loads(raw)
    except ValueError as exc:  # not JSON, or not UTF-8
        raise _not_an_object("json_invalid") from exc
    if not isinstance(body, dict):
        raise _not_an_object("dict_type")
    return _store(store, board, parse_workflow(body))


def _not_an_object(kind: str) -> RequestValidationError:
    """FastAPI's 422 for a body that is not JSON (``json_invalid``) or not an object."""
    if kind == "json_invalid":
        error = {"type": "json_invalid", "loc": ("body",), "msg": "JSON decode error", "input": {}}
    else:
        error = {"type": "dict_type", "loc": ("body",), "msg": "Input should be a valid dictionary"}
    return RequestValidationError([error])


def _store(store: Store, board: OfferBoard, workflow: WorkflowDef) -> p.SubmitAnswer:
    workflow_id = store.submit(workflow)
    # Lee 2003 4.2.3: urgent tasks with nothing to wait for go to standing offers at once
    board.push(board.urgent(t.priority for t in workflow.tasks if not t.after))
    return p.SubmitAnswer(workflow_id=workflow_id, tasks=len(workflow.tasks))


def _store_parsed(store: Store, board: OfferBoard, parsed: Any) -> p.SubmitAnswer:
    """A large submission, parsed in the worker process, stored in the calling thread as a
    CPU-bound job (``tq.service.cpu_bound``: the garbage collector paused meanwhile)."""
    with cpu_bound_job():
        return _store(store, board, workflow_of(parsed))


async def _submit_large(
    parser: SubmissionParser, store: Store, board: OfferBoard, raw: bytes
) -> p.SubmitAnswer:
    """A large submission parsed in ``parser``'s worker process, then stored in a thread."""
    kind, parsed = await parser.parse(raw)
    if kind == "workflow":
        raise WorkflowError(*parsed)
    if kind != "ok":
        raise _not_an_object(kind)
    return await run_in_threadpool(_store_parsed, store, board, parsed)


_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": s.ErrorResponse},
    403: {"model": s.ErrorResponse},
    404: {"model": s.ErrorResponse},
}


class _Owners:
    """The credential each pilot registered with, read from the store once per pilot (it never
    changes): a pilot's call costs no database read for it."""

    KEPT = 200_000  # pilots remembered (a dict entry each); then it starts again

    def __init__(self, store: Store) -> None:
        self.store = store
        self._owners: dict[int, int | None] = {}

    def owner(self, pilot_id: int) -> int | None:
        """TaskQueueNotFound for no such pilot."""
        if pilot_id in self._owners:
            return self._owners[pilot_id]
        owner = self.store.pilot_owner(pilot_id)
        self.remember(pilot_id, owner)
        return owner

    def remember(self, pilot_id: int, owner: int | None) -> None:
        """The pilot registered with ``owner`` (its first call costs no read either)."""
        if len(self._owners) >= self.KEPT:
            self._owners.clear()
        self._owners[pilot_id] = owner

    async def own_pilot(self, pilot_id: PilotId, who: Pilot) -> None:
        """A dependency: the pilot in the path must be the caller's own (registered with its
        token)."""
        check_pilot(who, pilot_id, self.owner(pilot_id))

    def owns(self, who: Principal, pilot_id: int) -> bool:
        """``own_pilot`` for the fast path: TaskQueueNotFound for no such pilot."""
        return self.owner(pilot_id) == who.credential_id


@dataclass
class _PilotCalls:
    """The pilots' hot calls, one handler each: the FastAPI routes run them, and the fast
    path (``tq.service.api.fastpath``) runs them for a well-formed call (caller, pilot id or None,
    validated body)."""

    store: Store
    settings: TqSettings
    costly: CostlyEvaluator
    board: OfferBoard
    owners: _Owners

    async def register(self, who: Principal, _pilot_id: int | None, body: Any) -> Response:
        registration = s.message(body, Registration)
        check_register(who, registration.site, registration.batch_id)
        answer = await unblocked(self.store, self.store.register, registration, who.credential_id)
        self.owners.remember(answer.pilot_id, who.credential_id)
        # this service answers ``complete-and-request`` (a pilot of before asks twice still),
        # also several pilots' in one request (``reports``)
        return s.wire(dataclasses.replace(answer, complete_and_request=True, batched_reports=True))

    async def take(self, _who: Principal, pilot_id: int | None, body: Any) -> Response:
        assert pilot_id is not None
        store, costly = self.store, self.costly
        request = s.message(body, TaskRequest)
        task = await _take(store, costly, pilot_id, request.cached)
        deadline = time.monotonic() + min(request.wait, self.settings.offer_max_wait)
        while task is None and (left := deadline - time.monotonic()) > 0:
            if not await _stand(self.board, pilot_id, left):
                break
            task = await _take(store, costly, pilot_id, request.cached)
        return s.wire({"task": task})

    async def complete(self, _who: Principal, pilot_id: int | None, body: Any) -> Response:
        assert pilot_id is not None
        completion = s.message(body, Completion)
        return s.wire(await unblocked(self.store, self.store.complete, pilot_id, completion))

    async def complete_and_request(
        self, _who: Principal, pilot_id: int | None, body: Any
    ) -> Response:
        """``complete`` then ``request`` in one transaction (``store.complete_and_request``);
        never a standing offer (a pilot that gets no task asks with a plain request)."""
        assert pilot_id is not None
        call = s.message(body, CompleteAndRequest)
        store = self.store
        await self.costly.settle(pilot_id, store.clock())
        return s.wire(await unblocked(store, store.complete_and_request, pilot_id, call))

    async def reports(self, who: Principal, _pilot_id: int | None, body: Any) -> Response:
        """Several pilots' ``complete-and-request``, each served as alone (``p.Reports``): a
        pilot not the caller's, or unknown, is refused in its place (403, 404), the others'
        calls run in order (``Store.complete_and_request_each``: one transaction for all, unless
        one fails)."""
        batch = s.message(body, p.Reports)
        store = self.store
        outcomes: list[p.ReportOutcome | None] = [None] * len(batch.reports)
        served: list[int] = []
        calls = []
        for index, report in enumerate(batch.reports):
            try:
                check_pilot(who, report.pilot_id, self.owners.owner(report.pilot_id))
            except TaskQueueError as exc:
                outcomes[index] = _refused(exc)
                continue
            await self.costly.settle(report.pilot_id, store.clock())
            served.append(index)
            calls.append((report.pilot_id, CompleteAndRequest(report.completion, report.cached)))
        results = await unblocked(store, store.complete_and_request_each, calls)
        for index, result in zip(served, results, strict=True):
            outcomes[index] = (
                _refused(result)
                if isinstance(result, TaskQueueError)
                else p.ReportOutcome(200, result)
            )
        return s.wire(p.ReportsAnswer(tuple(o for o in outcomes if o is not None)))


def _refused(exc: TaskQueueError) -> p.ReportOutcome:
    """A report's error as the call alone would have been answered (``error_answer``)."""
    return p.ReportOutcome(tq_http_status(exc), None, _one_line(str(exc)))


def create_app(
    store: Store,
    settings: TqSettings,
    loops: Sequence[WatchedLoop] = (),
    courier: OfferBoard | None = None,
) -> TaskQueueApp:
    """The application over ``store``; ``loops`` are the service's background loops (watched by
    ``/healthz``); ``courier``: the idle pilots' standing offers (``app.state.courier``: whoever
    learns of urgent tasks, another instance's included, may push to it); nothing starts until a
    server runs it."""
    app = TaskQueueApp(
        title="glidein-ext Task Queue",
        version="1",
        description="Pull-based task queue with cache-aware matching (Hasham 2011, section IV).",
    )
    board = courier if courier is not None else OfferBoard(settings.courier_priority)
    app.state.courier = board
    # regexp and its kin: evaluated in a worker process within a time budget, never on the
    # event loop (tq.service.matching.costly); whoever runs the app closes it (app.state.costly)
    costly = app.state.costly = CostlyEvaluator(store.matcher)
    # large submissions: parsed in a worker process (tq.service.api.large_submit), closed likewise
    parser = app.state.submission_parser = SubmissionParser()

    operator = [Depends(operator_access)]
    errors = _ERRORS

    owners = _Owners(store)
    mine = [Depends(owners.own_pilot)]

    def pilot_call(call: str, answer: type) -> Callable[[DecoratedCallable], DecoratedCallable]:
        """The route of a registered pilot's ``call``, which only its own credential makes."""
        return app.post(
            f"{API}/pilots/{{pilot_id}}/{call}",
            dependencies=mine,
            responses=errors,
            response_model=answer,
        )

    _translate_errors(app)

    # The pilots' hot calls, run by the FastAPI routes below and, when well formed, by the
    # fast path (api.fastpath) ahead of everything else: with the guard's token and bound
    calls = _PilotCalls(store, settings, costly, board, owners)
    tokens = load_verifier(settings.token_issuers) if settings.token_issuers else None
    authenticator = Authenticator(
        settings.operator_token, settings.pilot_token, store, tokens=tokens
    )
    app.add_middleware(
        RequestGuard,
        identify=authenticator.identify,
        max_body=settings.max_request_bytes,
        prefix=API,
    )
    app.fast_path = PilotFastPath(
        app.behind,
        prefix=API,
        calls={
            "": FastCall(s.RegisterRequest, calls.register),
            "request": FastCall(s.TaskRequest, calls.take),
            "complete": FastCall(s.CompleteRequest, calls.complete),
            "complete-and-request": FastCall(
                s.CompleteAndRequestRequest, calls.complete_and_request
            ),
        },
        pilots_calls={"reports": FastCall(s.ReportsRequest, calls.reports)},
        identify=authenticator.identify,
        max_body=settings.max_request_bytes,
        owns=owners.owns,
        answer_error=error_answer,
    )

    @app.get("/healthz")
    def healthz() -> JSONResponse:
        """The background loops (last good pass, errors, stuck: 503) and unloadable rows."""
        now = time.time()
        health = {loop.name: loop.health(now) for loop in loops}
        stuck = sorted(name for name, item in health.items() if item["stuck"])
        body = {
            "status": "stuck: " + ", ".join(stuck) if stuck else "ok",
            "loops": health,
            "skipped_rows": [row.to_json() for row in store.skipped.values()],
            "courier": {"offers": len(board), "pushed": board.pushed},  # Lee 2003 4.2.3
        }
        return JSONResponse(body, status_code=503 if stuck else 200)

    @app.post(f"{API}/pilots", responses=errors, response_model=s.RegisterResponse)
    async def register(body: s.RegisterRequest, who: Pilot) -> Response:
        """Register a pilot (Hasham 2011 §IV): its PilotID, and the other pilots on its host (IV-D).
        A credential registers at its own site only."""
        return await calls.register(who, None, body)

    @pilot_call("request", s.TaskResponse)
    async def request(pilot_id: PilotId, body: s.TaskRequest) -> Response:
        """Ask for a task (Hasham 2011 §IV-E); ``task`` is null when nothing fits now.  With
        ``wait``, nothing fits: the request stands as an offer an urgent task is pushed to (Lee 2003
        4.2.3, ``tq.service.pool.courier``), answered when one is or when the wait ends."""
        return await calls.take(Principal(pilot=True), pilot_id, body)

    @pilot_call("heartbeat", s.HeartbeatResponse)
    async def heartbeat(pilot_id: PilotId, body: s.HeartbeatRequest) -> Response:
        """I am alive (Hasham 2011 §IV-D); answers the other live pilots on the same host."""
        cached = s.message(body, Heartbeat).cached
        return s.wire(await unblocked(store, store.heartbeat, pilot_id, cached))

    @pilot_call("complete", s.CompleteResponse)
    async def complete(pilot_id: PilotId, body: s.CompleteRequest) -> Response:
        """A task ended; idempotent per (task, attempt)."""
        return await calls.complete(Principal(pilot=True), pilot_id, body)

    @pilot_call("complete-and-request", s.CompleteAndRequestResponse)
    async def complete_and_request(
        pilot_id: PilotId, body: s.CompleteAndRequestRequest
    ) -> Response:
        """A task ended, and the pilot asks for its next (Hasham 2011 §IV-E): one transaction,
        whose answer carries the completion's fate and the next task (null when nothing fits
        now: the pilot then asks with ``request``)."""
        return await calls.complete_and_request(Principal(pilot=True), pilot_id, body)

    @app.post(f"{API}/pilots/reports", responses=errors, response_model=p.ReportsAnswer)
    async def reports(body: s.ReportsRequest, who: Pilot) -> Response:
        """Several pilots' ``complete-and-request`` in one request (the pilots of one process
        whose reports are ready at once): each served as it would be alone, in order, its
        outcome in its place (status 200 and the answer, or the status and the line the call
        alone would get: a pilot not the caller's 403, unknown 404)."""
        return await calls.reports(who, None, body)

    @app.delete(f"{API}/pilots/{{pilot_id}}", dependencies=mine, responses=errors)
    async def deregister(pilot_id: PilotId) -> dict[str, bool]:
        """The pilot leaves; a task it held is requeued."""
        await unblocked(store, store.deregister, pilot_id)
        return {"ok": True}

    @app.post(
        f"{API}/workflows",
        dependencies=operator,
        responses={**errors, 422: {"model": s.ErrorResponse}},
        openapi_extra=_WORKFLOW_BODY,
    )
    async def submit(request: Request) -> p.SubmitAnswer:
        """Submit a workflow (the JSON form of a workflow file); all of it or nothing."""
        raw = await request.body()
        if len(raw) >= LARGE:
            return await _submit_large(parser, store, board, raw)
        return await run_in_threadpool(_submit_now, store, board, raw)

    @app.get(f"{API}/status", dependencies=operator, responses=errors, response_model=p.Status)
    def status() -> Response:
        """Workflows with tasks by state; pilots by site and state."""
        return s.wire(store.status())

    # Delgado Peris 2014: the master's calls, the counters
    install_sites(app, store, operator, costly, owners.owner)
    install_credentials(app, store, operator)  # per-pilot credentials (tq.client.credentials)
    return app
