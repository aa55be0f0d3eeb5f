"""Who calls the Task Queue, and what they may do (pure: the API applies it).

A bearer token is one of four things (``Authenticator.identify``): the operator token; the shared
pilot token (small setups: it may act on every pilot registered with it); a per-pilot credential
(``tq.client.credentials``), looked up by its hash; or, where the operator configures token
issuers, a JWT of the WLCG Common JWT Profile (``tq.service.api.wlcg_tokens``: an operator's
``compute.*`` scopes, or a pilot's scope bound to one site).  An unknown or refused token is 401
(a JWT's refusal says why in one line); a revoked or expired credential 403.  The rules for a
credential, each a 403 that changes nothing:

- it registers pilots only at its own site (and, once bound to a batch job by the PilotManager,
  only with that job's batch id); a pilot JWT likewise at its token's site;
- a pilot call (request, heartbeat, complete, deregister) acts only on a pilot registered with
  the same credential, and the shared token only on pilots registered without one (the shared
  token's and pilot JWTs': a JWT is a group's token, as the shared one is);
- a distributed site's master calls (``/sites/{site}/...``) need a credential (or pilot JWT) of
  that site, and the master pilot they name must be one of the credential's (the epoch rule comes
  after).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from glidein_ext.errors import TaskQueueForbidden
from glidein_ext.tq.client.credentials import CredentialInfo, is_credential, secret_hash
from glidein_ext.tq.client.limits import shorten
from glidein_ext.tq.service.api.wlcg_tokens import TokenRefused, TokenVerifier, looks_like_jwt

# A message, not a token.
TOKEN_REQUIRED = "a valid operator token or pilot token is required"  # noqa: S105


@dataclass(frozen=True)
class Principal:
    """The caller a token stands for."""

    operator: bool = False
    pilot: bool = False
    credential_id: int | None = None  # None: the shared pilot token (or no pilot at all)
    site: str | None = None  # a credential's site
    batch_id: str | None = None  # the batch job a credential is bound to
    subject: str | None = None  # a JWT's issuer and subject (its site is ``site``)

    def describe(self) -> str:
        if self.subject is not None:
            return f"the token of {shorten(self.subject, 80)} (site {shorten(self.site, 60)})"
        if self.credential_id is None:
            return "the shared pilot token"
        return f"credential {self.credential_id} (site {shorten(self.site, 60)})"


@dataclass(frozen=True)
class Refusal:
    """A token that identifies nobody (401) or a credential that no longer counts (403)."""

    status: int
    detail: str


class CredentialLookup(Protocol):
    """The store's side: a credential by the hash of its secret."""

    def credential_by_hash(self, digest: str) -> CredentialInfo | None: ...


class Authenticator:
    """Token -> Principal or Refusal; the shared tokens compared in constant time."""

    def __init__(
        self,
        operator_token: str,
        pilot_token: str,
        lookup: CredentialLookup,
        clock: Callable[[], float] = time.time,
        tokens: TokenVerifier | None = None,
    ) -> None:
        self.operator_token = operator_token.encode()
        self.pilot_token = pilot_token.encode()
        self.lookup = lookup
        self.clock = clock
        self.tokens = tokens

    def identify(self, given: bytes) -> Principal | Refusal:
        if not given:
            return Refusal(401, TOKEN_REQUIRED)
        # Both compared whatever the first gives: the time does not say which one matched.
        operator = bool(self.operator_token) & hmac.compare_digest(given, self.operator_token)
        pilot = bool(self.pilot_token) & hmac.compare_digest(given, self.pilot_token)
        if operator or pilot:
            return Principal(operator=operator, pilot=pilot)
        try:
            token = given.decode("ascii")
        except UnicodeDecodeError:
            return Refusal(401, TOKEN_REQUIRED)
        if self.tokens is not None and looks_like_jwt(token):
            return self._jwt(self.tokens, token)
        if not is_credential(token):
            return Refusal(401, TOKEN_REQUIRED)
        info = self.lookup.credential_by_hash(secret_hash(token))
        if info is None:
            return Refusal(401, "unknown credential")
        state = info.state(self.clock())
        if state != "valid":
            return Refusal(403, f"credential {info.id} is {state}")
        return Principal(pilot=True, credential_id=info.id, site=info.site, batch_id=info.batch_id)

    @staticmethod
    def _jwt(tokens: TokenVerifier, token: str) -> Principal | Refusal:
        try:
            found = tokens.verify(token)
        except TokenRefused as exc:
            return Refusal(401, str(exc))
        return Principal(
            operator=found.operator,
            pilot=found.pilot,
            site=found.site,
            subject=f"{found.subject} of {found.issuer}",
        )


def check_register(who: Principal, site: str, batch_id: str | None) -> None:
    """A credential (or pilot JWT) registers pilots at its site only (and a credential for its
    batch job once bound)."""
    if who.site is None:
        return
    if site != who.site:
        raise TaskQueueForbidden(
            f"{who.describe()} cannot register a pilot at site {shorten(site, 60)}"
        )
    if who.batch_id is not None and batch_id != who.batch_id:
        raise TaskQueueForbidden(
            f"{who.describe()} belongs to batch job {who.batch_id}, not {shorten(batch_id, 60)}"
        )


def check_pilot(who: Principal, pilot_id: int, owner: int | None) -> None:
    """A caller acts only on the pilots registered with its own credential (``owner``)."""
    if owner != who.credential_id:
        raise TaskQueueForbidden(f"pilot {pilot_id} is not a pilot of {who.describe()}")


def check_site(who: Principal, site: str) -> None:
    """A distributed site's master calls need a credential (or pilot JWT) of that site."""
    if who.site is not None and site != who.site:
        raise TaskQueueForbidden(f"{who.describe()} cannot act for site {shorten(site, 60)}")
