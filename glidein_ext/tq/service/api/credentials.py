"""The operators' calls for per-pilot credentials (``tq.client.credentials``), mounted by
``app.create_app`` (``install``).

| call | token | body → answer |
| --- | --- | --- |
| ``POST /api/v1/credentials`` | operator | ``{site, count, ttl, note}`` → ``{credentials: [{id, site, secret, expires_at, note}]}`` |
| ``GET /api/v1/credentials`` | operator | → ``{credentials: [{id, site, created_at, expires_at, revoked_at, note, batch_id, pilots}]}`` |
| ``DELETE /api/v1/credentials/{id}`` | operator | → ``{id, revoked, pilots}`` (the pilots it ended) |

A secret is in the answer to ``POST`` and nowhere else: the Task Queue keeps its hash.
"""  # noqa: E501 (a table)

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import FastAPI, Path
from fastapi.params import Depends
from pydantic import BaseModel, Field

from glidein_ext.tq.client.credentials import MAX_MINT, MAX_NOTE_CHARS, MAX_TTL
from glidein_ext.tq.client.limits import INT64_MAX
from glidein_ext.tq.client.protocol import API
from glidein_ext.tq.service.api.schemas import ErrorResponse, Identifier, Text
from glidein_ext.tq.service.store import Store

CredentialId = Annotated[int, Path(ge=1, le=INT64_MAX)]


class MintRequest(BaseModel):
    """New credentials of ``site``: ``count`` of them, expiring after ``ttl`` seconds (null:
    never), with a note for the operators' list."""

    site: Identifier
    count: Annotated[int, Field(ge=1, le=MAX_MINT)] = 1
    ttl: Annotated[int | None, Field(ge=1, le=MAX_TTL)] = None
    note: Annotated[Text, Field(max_length=MAX_NOTE_CHARS)] = ""


def install(app: FastAPI, store: Store, operator: Sequence[Depends]) -> None:
    """Add the credential calls (operator token) to ``app``."""
    errors: dict[int | str, dict[str, Any]] = {
        401: {"model": ErrorResponse},
        404: {"model": ErrorResponse},
    }

    @app.post(f"{API}/credentials", dependencies=list(operator), responses=errors)
    def mint(body: MintRequest) -> dict[str, Any]:
        """Mint credentials for pilots of one site; each secret is shown here only."""
        issued = store.mint_credentials(body.site, body.count, ttl=body.ttl, note=body.note)
        return {"credentials": [item.to_json() for item in issued]}

    @app.get(f"{API}/credentials", dependencies=list(operator), responses=errors)
    def listing() -> dict[str, Any]:
        """Every credential, without secrets: site, expiry, revocation, batch job, pilots."""
        return {"credentials": [item.to_json() for item in store.credentials()]}

    @app.delete(
        f"{API}/credentials/{{credential_id}}", dependencies=list(operator), responses=errors
    )
    def revoke(credential_id: CredentialId) -> dict[str, Any]:
        """Revoke a credential: every later call with it is refused (403); its live pilots are
        lost at once and their tasks requeued."""
        ended = store.revoke_credential(credential_id)
        return {"id": credential_id, "revoked": True, "pilots": ended}
