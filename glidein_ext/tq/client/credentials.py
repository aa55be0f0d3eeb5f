"""Per-pilot credentials of the Task Queue: random secrets bound to a site, stored hashed.

A credential is minted for one glidein or one batch of pilots (by the PilotManager for each job it
submits, or by an operator with ``glidein-ext tq credential mint``).  Its secret is
``gxp_`` + 256 random bits (URL-safe base64) and is shown once, to whoever minted it; the Task
Queue keeps only its SHA-256.  A fast hash is enough here: the secret is random and long, there
is nothing to guess from a dictionary, and the hash is what the lookup is keyed by (so no
comparison of secrets takes a time that depends on them).  A credential is revocable, may expire,
and may be bound to the batch job that carries it.  What a credential may do is
``tq.service.api.auth``.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import asdict, dataclass
from typing import Any

PREFIX = "gxp_"  # tells a credential from the shared tokens without a database lookup
MAX_TOKEN_CHARS = 200  # a longer bearer token is no credential (never hashed nor looked up)
MAX_NOTE_CHARS = 200
MAX_MINT = 10_000  # credentials minted by one call
MAX_TTL = 10 * 365 * 86400  # seconds a credential may be minted for


def new_secret() -> str:
    """A fresh credential secret (256 random bits)."""
    return PREFIX + secrets.token_urlsafe(32)


def secret_hash(secret: str) -> str:
    """What the Task Queue stores of a secret: its SHA-256, hex."""
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()


def is_credential(token: str) -> bool:
    """Whether a bearer token has a credential's form (else it is not looked up)."""
    return token.startswith(PREFIX) and len(token) <= MAX_TOKEN_CHARS


@dataclass(frozen=True)
class IssuedCredential:
    """A credential just minted: the only time its secret exists outside the holder."""

    id: int
    site: str
    secret: str
    expires_at: float | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CredentialInfo:
    """A credential as the Task Queue knows it (no secret): for ``tq credential list``."""

    id: int
    site: str
    created_at: float
    expires_at: float | None = None
    revoked_at: float | None = None
    note: str = ""
    batch_id: str | None = None  # the batch job that carries it (PilotManager)
    pilots: int = 0  # pilots registered with it

    def state(self, now: float) -> str:
        """``valid``, ``revoked`` or ``expired`` at ``now``."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "valid"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
