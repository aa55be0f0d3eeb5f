"""The Task Queue HTTP API (FastAPI): the pilot protocol of Hasham 2011 §IV and the operators'
calls.

Pilots and operators each carry their own bearer token; a call without a valid one is refused
before its body is read, and bodies are bounded (``tq.service.guard``).  A pilot's token is the
shared pilot token or its own credential; what each may do (its site, its own pilots) is
``tq.service.auth``,
checked here before the store is called: a refusal (403) changes nothing.  Everything a call
carries is checked before anything is stored (``tq.service.schemas`` and ``tq.workflow``, by
``tq.client.limits``).  Errors of the store become HTTP answers here: unknown or gone pilots
404, bad requests 422 (a body nested too deeply too), other TQ failures 503.  ``/healthz`` says
whether
the service's background loops pass (503 when one is stuck) and which database rows it could not
load.  The store answers with the protocol's dataclasses (``tq.client.protocol``); the pydantic
schemas built from them here give the same JSON and the OpenAPI description.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from glidein_ext.errors import (
    TaskQueueAuthError,
    TaskQueueError,
    TaskQueueForbidden,
    TaskQueueNotFound,
    TaskQueueRequestError,
)
from glidein_ext.tq.client.limits import INT64_MAX
from glidein_ext.tq.client.protocol import Completion, Registration, to_json
from glidein_ext.tq.service import schemas as s
from glidein_ext.tq.service.api_auth import Pilot, operator_access
from glidein_ext.tq.service.api_credentials import install as install_credentials
from glidein_ext.tq.service.api_sites import install as install_sites
from glidein_ext.tq.service.auth import Authenticator, check_pilot, check_register
from glidein_ext.tq.service.courier import OfferBoard
from glidein_ext.tq.service.guard import RequestGuard
from glidein_ext.tq.service.loops import WatchedLoop
from glidein_ext.tq.service.settings import TqSettings
from glidein_ext.tq.service.store import Store
from glidein_ext.tq.workflow import parse_workflow

API = "/api/v1"
PilotId = Annotated[int, Path(ge=1, le=INT64_MAX)]


def _one_line(text: str, limit: int = 500) -> str:
    """An error's text as the answer carries it: one line, bounded, encodable."""
    flat = " ".join(text.split())[:limit]
    return flat.encode("utf-8", "backslashreplace").decode("utf-8")


def _translate_errors(app: FastAPI) -> None:
    """The store's errors as HTTP answers (403, 401, 404, 422, else 503), one line each."""

    @app.exception_handler(TaskQueueError)
    async def _translate(_request: Request, exc: TaskQueueError) -> JSONResponse:
        if isinstance(exc, TaskQueueForbidden):
            code = 403
        elif isinstance(exc, TaskQueueAuthError):
            code = 401
        elif isinstance(exc, TaskQueueNotFound):
            code = 404
        elif isinstance(exc, TaskQueueRequestError):
            code = 422
        else:
            code = 503
        return JSONResponse({"detail": _one_line(str(exc))}, status_code=code)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        """One line per refused field (the first three), never the value itself."""
        found = [
            f"{'.'.join(str(part)[:40] for part in error['loc'])}: {error['msg']}"
            for error in exc.errors()[:3]
        ]
        return JSONResponse({"detail": _one_line("; ".join(found))}, status_code=422)

    @app.exception_handler(RecursionError)
    async def _too_deep(_request: Request, _exc: RecursionError) -> JSONResponse:
        return JSONResponse({"detail": "the request body is nested too deeply"}, status_code=422)


async def _stand(board: OfferBoard, pilot_id: int, wait: float) -> bool:
    """Seed 002 4.2.3: the pilot's request stands as an offer for up to ``wait`` s; True if an
    urgent task was pushed to it (it should take again), False when the wait ended."""
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
    return True


def create_app(
    store: Store,
    settings: TqSettings,
    loops: Sequence[WatchedLoop] = (),
    courier: OfferBoard | None = None,
) -> FastAPI:
    """The application over ``store``; ``loops`` are the service's background loops (watched by
    ``/healthz``); ``courier``: the idle pilots' standing offers (``app.state.courier``: whoever
    learns of urgent tasks, another instance's included, may push to it); nothing starts until a
    server runs it."""
    app = FastAPI(
        title="glidein-ext Task Queue",
        version="1",
        description="Pull-based task queue with cache-aware matching (Hasham 2011, section IV).",
    )
    board = courier if courier is not None else OfferBoard(settings.courier_priority)
    app.state.courier = board

    operator = [Depends(operator_access)]
    errors: dict[int | str, dict[str, Any]] = {
        401: {"model": s.ErrorResponse},
        403: {"model": s.ErrorResponse},
        404: {"model": s.ErrorResponse},
    }

    async def own_pilot(pilot_id: PilotId, who: Pilot) -> None:
        """The pilot in the path must be the caller's own (registered with its token)."""
        check_pilot(who, pilot_id, store.pilot_owner(pilot_id))

    mine = [Depends(own_pilot)]

    _translate_errors(app)
    authenticator = Authenticator(settings.operator_token, settings.pilot_token, store)
    app.add_middleware(
        RequestGuard,
        identify=authenticator.identify,
        max_body=settings.max_request_bytes,
        prefix=API,
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

    @app.post(f"{API}/pilots", responses=errors)
    async def register(body: s.RegisterRequest, who: Pilot) -> s.RegisterResponse:
        """Register a pilot (Hasham 2011 §IV): its PilotID, and the other pilots on its host (IV-D).
        A credential registers at its own site only."""
        check_register(who, body.site, body.batch_id)
        registration = Registration(**{**body.model_dump(), "cached": tuple(body.cached)})
        answer = store.register(registration, who.credential_id)
        return s.RegisterResponse.model_validate(to_json(answer))

    @app.post(f"{API}/pilots/{{pilot_id}}/request", dependencies=mine, responses=errors)
    async def request(pilot_id: PilotId, body: s.TaskRequest) -> s.TaskResponse:
        """Ask for a task (Hasham 2011 §IV-E); ``task`` is null when nothing fits now.  With
        ``wait``, nothing fits: the request stands as an offer an urgent task is pushed to (Lee 2003
        4.2.3, ``tq.service.courier``), answered when one is or when the wait ends."""
        task = store.request(pilot_id, body.cached)
        deadline = time.monotonic() + min(body.wait, settings.offer_max_wait)
        while task is None and (left := deadline - time.monotonic()) > 0:
            if not await _stand(board, pilot_id, left):
                break
            task = store.request(pilot_id, body.cached)
        return s.TaskResponse.model_validate({"task": to_json(task)})

    @app.post(f"{API}/pilots/{{pilot_id}}/heartbeat", dependencies=mine, responses=errors)
    async def heartbeat(pilot_id: PilotId, body: s.HeartbeatRequest) -> s.HeartbeatResponse:
        """I am alive (Hasham 2011 §IV-D); answers the other live pilots on the same host."""
        return s.HeartbeatResponse.model_validate(to_json(store.heartbeat(pilot_id, body.cached)))

    @app.post(f"{API}/pilots/{{pilot_id}}/complete", dependencies=mine, responses=errors)
    async def complete(pilot_id: PilotId, body: s.CompleteRequest) -> s.CompleteResponse:
        """A task ended; idempotent per (task, attempt)."""
        completion = Completion(**{**body.model_dump(), "outputs": tuple(body.outputs)})
        return s.CompleteResponse.model_validate(to_json(store.complete(pilot_id, completion)))

    @app.delete(f"{API}/pilots/{{pilot_id}}", dependencies=mine, responses=errors)
    async def deregister(pilot_id: PilotId) -> dict[str, bool]:
        """The pilot leaves; a task it held is requeued."""
        store.deregister(pilot_id)
        return {"ok": True}

    @app.post(
        f"{API}/workflows",
        dependencies=operator,
        responses={**errors, 422: {"model": s.ErrorResponse}},
    )
    def submit(body: dict[str, Any]) -> s.SubmitResponse:
        """Submit a workflow (the JSON form of a workflow file); all of it or nothing."""
        workflow = parse_workflow(body)
        workflow_id = store.submit(workflow)
        # Lee 2003 4.2.3: urgent tasks with nothing to wait for go to standing offers at once
        board.push(board.urgent(t.priority for t in workflow.tasks if not t.after))
        return s.SubmitResponse(workflow_id=workflow_id, tasks=len(workflow.tasks))

    @app.get(f"{API}/status", dependencies=operator, responses=errors)
    def status() -> s.StatusResponse:
        """Workflows with tasks by state; pilots by site and state."""
        return s.StatusResponse.model_validate(to_json(store.status()))

    install_sites(app, store, operator)  # Delgado Peris 2014: the master's calls, the counters
    install_credentials(app, store, operator)  # per-pilot credentials (tq.client.credentials)
    return app
