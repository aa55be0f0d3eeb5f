"""The Task Queue HTTP API (FastAPI): the pilot protocol of seed 001 IV and the operators' calls.

Pilots and operators each carry their own bearer token; a call without a valid one is refused
before its body is read, and bodies are bounded (``tq.guard``).  Everything a call carries is
checked before anything is stored (``tq.schemas`` and ``tq.workflow``, by ``tq.limits``).  Errors
of the store become HTTP answers here: unknown or gone pilots 404, bad requests 422 (a body
nested too deeply too), other TQ failures 503.  ``/healthz`` says whether the service's
background loops pass (503 when one is stuck) and which database rows it could not load.  The
store answers with the protocol's dataclasses (``tq.protocol``); the pydantic schemas built from
them here give the same JSON and the OpenAPI description.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from glidein_ext.errors import (
    TaskQueueAuthError,
    TaskQueueError,
    TaskQueueNotFound,
    TaskQueueRequestError,
)
from glidein_ext.tq import schemas as s
from glidein_ext.tq.api_sites import install as install_sites
from glidein_ext.tq.guard import RequestGuard
from glidein_ext.tq.limits import INT64_MAX
from glidein_ext.tq.loops import WatchedLoop
from glidein_ext.tq.protocol import Completion, Registration, to_json
from glidein_ext.tq.settings import TqSettings
from glidein_ext.tq.store import Store
from glidein_ext.tq.workflow import parse_workflow

API = "/api/v1"
_bearer = HTTPBearer(auto_error=False)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
PilotId = Annotated[int, Path(ge=1, le=INT64_MAX)]


def _check(credentials: HTTPAuthorizationCredentials | None, expected: str, who: str) -> None:
    given = credentials.credentials if credentials is not None else ""
    if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
        raise TaskQueueAuthError(f"a valid {who} token is required")


def _one_line(text: str, limit: int = 500) -> str:
    """An error's text as the answer carries it: one line, bounded, encodable."""
    flat = " ".join(text.split())[:limit]
    return flat.encode("utf-8", "backslashreplace").decode("utf-8")


def token_check(expected: str, who: str) -> Callable[[HTTPAuthorizationCredentials | None], None]:
    """A FastAPI dependency: the call needs the bearer token ``expected`` (of ``who``)."""

    def check(credentials: Credentials) -> None:
        _check(credentials, expected, who)

    return check


def create_app(store: Store, settings: TqSettings, loops: Sequence[WatchedLoop] = ()) -> FastAPI:
    """The application over ``store``; ``loops`` are the service's background loops (watched by
    ``/healthz``); nothing starts until a server runs it."""
    app = FastAPI(
        title="glidein-ext Task Queue",
        version="1",
        description="Pull-based task queue with cache-aware matching (seed 001, section IV).",
    )

    pilot = [Depends(token_check(settings.pilot_token, "pilot"))]
    operator = [Depends(token_check(settings.operator_token, "operator"))]
    errors: dict[int | str, dict[str, Any]] = {
        401: {"model": s.ErrorResponse},
        404: {"model": s.ErrorResponse},
    }

    @app.exception_handler(TaskQueueError)
    async def _translate(_request: Request, exc: TaskQueueError) -> JSONResponse:
        if isinstance(exc, TaskQueueAuthError):
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

    app.add_middleware(
        RequestGuard,
        tokens=[settings.operator_token, settings.pilot_token],
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
        }
        return JSONResponse(body, status_code=503 if stuck else 200)

    @app.post(f"{API}/pilots", dependencies=pilot, responses=errors)
    async def register(body: s.RegisterRequest) -> s.RegisterResponse:
        """Register a pilot (seed IV): its PilotID, and the other pilots on its host (IV-D)."""
        registration = Registration(**{**body.model_dump(), "cached": tuple(body.cached)})
        return s.RegisterResponse.model_validate(to_json(store.register(registration)))

    @app.post(f"{API}/pilots/{{pilot_id}}/request", dependencies=pilot, responses=errors)
    async def request(pilot_id: PilotId, body: s.TaskRequest) -> s.TaskResponse:
        """Ask for a task (seed IV-E); ``task`` is null when nothing fits now."""
        task = store.request(pilot_id, body.cached)
        return s.TaskResponse.model_validate({"task": to_json(task)})

    @app.post(f"{API}/pilots/{{pilot_id}}/heartbeat", dependencies=pilot, responses=errors)
    async def heartbeat(pilot_id: PilotId, body: s.HeartbeatRequest) -> s.HeartbeatResponse:
        """I am alive (seed IV-D); answers the other live pilots on the same host."""
        return s.HeartbeatResponse.model_validate(to_json(store.heartbeat(pilot_id, body.cached)))

    @app.post(f"{API}/pilots/{{pilot_id}}/complete", dependencies=pilot, responses=errors)
    async def complete(pilot_id: PilotId, body: s.CompleteRequest) -> s.CompleteResponse:
        """A task ended; idempotent per (task, attempt)."""
        completion = Completion(**{**body.model_dump(), "outputs": tuple(body.outputs)})
        return s.CompleteResponse.model_validate(to_json(store.complete(pilot_id, completion)))

    @app.delete(f"{API}/pilots/{{pilot_id}}", dependencies=pilot, responses=errors)
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
        return s.SubmitResponse(workflow_id=store.submit(workflow), tasks=len(workflow.tasks))

    @app.get(f"{API}/status", dependencies=operator, responses=errors)
    def status() -> s.StatusResponse:
        """Workflows with tasks by state; pilots by site and state."""
        return s.StatusResponse.model_validate(to_json(store.status()))

    install_sites(app, store, pilot, operator)  # seed 000: the master's calls, the counters
    return app
