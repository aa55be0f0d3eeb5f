"""The API's doors (FastAPI dependencies): who a call comes from, and whether it may enter.

The guard (``tq.service.api.guard``) has already turned the bearer token into a
``tq.service.api.auth.Principal`` (or refused it) before the body was read; these dependencies read
it from the request and refuse a call of the wrong kind with 401: an operator call without the
operator token, a pilot call without
the shared pilot token or a credential.  ``HTTPBearer`` is declared for the OpenAPI description.
They are coroutines: FastAPI would run plain functions in its thread pool, a hop that costs more
than the check (the pilot calls run on the event loop).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from glidein_ext.errors import TaskQueueAuthError
from glidein_ext.tq.service.api.auth import TOKEN_REQUIRED, Principal
from glidein_ext.tq.service.api.guard import PRINCIPAL

_bearer = HTTPBearer(auto_error=False)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def caller(request: Request) -> Principal:
    """Who the call comes from, as the guard found it."""
    who = request.scope.get(PRINCIPAL)
    if not isinstance(who, Principal):
        raise TaskQueueAuthError(TOKEN_REQUIRED)
    return who


async def operator_access(request: Request, _token: Credentials) -> Principal:
    """The call needs the operator token."""
    who = caller(request)
    if not who.operator:
        raise TaskQueueAuthError("a valid operator token is required")
    return who


async def pilot_access(request: Request, _token: Credentials) -> Principal:
    """The call needs the shared pilot token or a pilot credential."""
    who = caller(request)
    if not who.pilot:
        raise TaskQueueAuthError("a valid pilot token is required")
    return who


Pilot = Annotated[Principal, Depends(pilot_access)]
Operator = Annotated[Principal, Depends(operator_access)]
