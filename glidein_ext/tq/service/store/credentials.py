"""The store's side of per-pilot credentials (``tq.client.credentials``): mint, look up, bind,
revoke.

Only the SHA-256 of a secret is stored.  Revoking a credential ends its live pilots at once (they
are ``lost``, their tasks requeued): at a distributed site the master vouches for every pilot of
the site, so a revoked pilot would otherwise never lapse.  Which pilot a credential registered is
``pilots.credential_id`` (``pilot_owner``); the rules are ``tq.service.api.auth``.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from glidein_ext.errors import TaskQueueNotFound, TaskQueueRequestError
from glidein_ext.tq.client.credentials import (
    MAX_MINT,
    MAX_NOTE_CHARS,
    MAX_TTL,
    CredentialInfo,
    IssuedCredential,
    new_secret,
    secret_hash,
)
from glidein_ext.tq.client.limits import MAX_NAME_CHARS, text_problem
from glidein_ext.tq.models import PilotState
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.store.core import ACTIVE, StoreCore, Tx, inserted_id, record
from glidein_ext.tq.service.store.pilots import PilotProtocol


def _problem(site: str, count: int, ttl: float | None, note: str) -> str | None:
    if not site:
        return "site: must not be empty"
    problem = text_problem(site, MAX_NAME_CHARS)
    if problem is not None:
        return f"site: {problem}"
    if not 1 <= count <= MAX_MINT:
        return f"count: must be 1..{MAX_MINT}, got {count}"
    if ttl is not None and not 1 <= ttl <= MAX_TTL:
        return f"ttl: must be 1..{MAX_TTL} seconds, got {ttl}"
    problem = text_problem(note, MAX_NOTE_CHARS)
    return None if problem is None else f"note: {problem}"


class CredentialStore:
    """Credentials over the database, in the caller's transaction; a revoked credential's pilots
    leave through the pilot protocol."""

    def __init__(self, core: StoreCore, pilots: PilotProtocol) -> None:
        self.core = core
        self.pilots = pilots

    def mint_credentials(
        self, tx: Tx, site: str, count: int, ttl: float | None, note: str
    ) -> list[IssuedCredential]:
        """``count`` new credentials of ``site``, expiring ``ttl`` seconds from now (None:
        never); their secrets are in the answer and nowhere else."""
        problem = _problem(site, count, ttl, note)
        if problem is not None:
            raise TaskQueueRequestError(f"cannot mint credentials: {problem}")
        now = self.core.clock()
        expires = None if ttl is None else now + ttl
        issued = []
        conn = tx.conn
        for _ in range(count):
            secret = new_secret()
            result = conn.execute(
                sa.insert(t.credentials).values(
                    site=site,
                    secret_hash=secret_hash(secret),
                    created_at=now,
                    expires_at=expires,
                    revoked_at=None,
                    note=note,
                    batch_id=None,
                )
            )
            issued.append(IssuedCredential(inserted_id(result), site, secret, expires, note))
        return issued

    def credential_by_hash(self, conn: Connection, digest: str) -> CredentialInfo | None:
        """The credential whose secret hashes to ``digest``, or None."""
        row = conn.execute(
            sa.select(t.credentials).where(t.credentials.c.secret_hash == digest)
        ).one_or_none()
        return None if row is None else record(CredentialInfo, row, pilots=0)

    def credentials(self, conn: Connection) -> list[CredentialInfo]:
        """Every credential (no secret), with the number of pilots registered with each."""
        counts = (
            sa.select(t.pilots.c.credential_id, sa.func.count().label("n"))
            .where(t.pilots.c.credential_id.is_not(None))
            .group_by(t.pilots.c.credential_id)
            .subquery()
        )
        query = (
            sa.select(t.credentials, counts.c.n)
            .outerjoin(counts, counts.c.credential_id == t.credentials.c.id)
            .order_by(t.credentials.c.id)
        )
        return [record(CredentialInfo, row, pilots=row.n or 0) for row in conn.execute(query)]

    def bind_credentials(self, tx: Tx, pairs: Sequence[tuple[int, str]]) -> None:
        """Bind credentials to the batch jobs carrying them (credential id, batch id): they then
        register only with that batch id, and are revoked if the job vanishes."""
        conn = tx.conn
        for credential_id, batch_id in pairs:
            conn.execute(
                t.credentials.update()
                .where(t.credentials.c.id == credential_id)
                .values(batch_id=batch_id)
            )

    def revoke_credential(self, tx: Tx, credential_id: int) -> list[int]:
        """Revoke a credential (again: a no-op); its live pilots are lost, their tasks
        requeued.  The pilots it ended; TaskQueueNotFound if there is no such credential."""
        conn = tx.conn
        row = conn.execute(
            sa.select(t.credentials).where(t.credentials.c.id == credential_id).with_for_update()
        ).one_or_none()
        if row is None:
            raise TaskQueueNotFound(f"no credential {credential_id}")
        if row.revoked_at is None:
            conn.execute(
                t.credentials.update()
                .where(t.credentials.c.id == credential_id)
                .values(revoked_at=self.core.clock())
            )
        live = list(
            conn.execute(
                sa.select(t.pilots.c.id).where(
                    t.pilots.c.credential_id == credential_id, t.pilots.c.state.in_(ACTIVE)
                )
            ).scalars()
        )
        if live:
            self.pilots.retire(tx, sorted(live), PilotState.LOST)
        return sorted(live)

    def pilot_owner(self, conn: Connection, pilot_id: int) -> int | None:
        """The credential the pilot registered with (None: the shared token);
        TaskQueueNotFound if there is no such pilot."""
        row = conn.execute(
            sa.select(t.pilots.c.credential_id).where(t.pilots.c.id == pilot_id)
        ).one_or_none()
        if row is None:
            raise TaskQueueNotFound(f"pilot {pilot_id} is unknown")
        return None if row.credential_id is None else int(row.credential_id)
