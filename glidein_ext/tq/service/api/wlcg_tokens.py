"""The grid's own tokens: JWTs of the WLCG Common JWT Profile (and SciTokens) as Task Queue callers.

A VO's token issuer (INDIGO IAM, CILogon) signs the tokens glideinWMS frontends and HTCondor
hand to pilots and operators; the Task Queue verifies them offline against the keys of the issuers
its operator configures (``token_issuers``: a YAML file) and maps each to a role.  The rules, from
the WLCG Common JWT Profile (v1.0, sections 2-3: "Common Claims", "Signature", "Token
Validation") and RFC 7519/7515:

- the header's ``alg`` is RS256 or ES256 (the profile's signing algorithms); ``none`` and the
  HMAC ones (a public key used as an HS256 secret) are refused before any key is looked at;
- the key is the issuer's key of the header's ``kid`` (a JWKS file, or the issuer's JWKS URL,
  fetched and kept for ``cache_seconds``); an unknown ``kid`` is refused;
- ``iss`` is a configured issuer; ``exp``, ``iat``, ``sub`` and ``aud`` are present; ``exp`` is
  not past and ``nbf`` (when present) not ahead, each within ``leeway`` seconds;
- ``aud`` names this Task Queue (``audience``; the profile's any-audience
  ``https://wlcg.cern.ch/jwt/v1/any`` only where ``accept_any_audience`` is set);
- the role comes from the ``scope`` claim (space-separated, profile section 3.3): an operator holds
  one of the issuer's ``operator_scopes`` (the profile's ``compute.*`` scopes, "Capability-based
  authorization: compute"), a pilot the issuer's ``pilot_scope``; ``operator_subjects`` and
  ``pilot_subjects``, where given, list who may hold the role; a token whose scopes grant no role,
  or a role its subject may not hold, is refused;
- a pilot is bound to one site: the value of the issuer's ``site_claim``, else ``sites[sub]``.

Each refusal is one line (a 401).  The file::

    audience: https://tq.example.org:8765
    accept_any_audience: false
    leeway: 30
    issuers:
      - issuer: https://cms-auth.web.cern.ch/
        jwks_file: /etc/glidein-ext/cms-iam.jwks     # or jwks_url: https://.../jwk
        operator_scopes: [compute.create, compute.modify, compute.read, compute.cancel]
        operator_subjects: [a1b2-...]                # optional
        pilot_scope: glidein-ext.pilot
        site_claim: glidein_site                     # optional
        sites: {pilot-subject-uuid: T2_XY}           # optional
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glidein_ext.errors import ConfigError
from glidein_ext.tq.client.limits import shorten

ALGORITHMS = ("RS256", "ES256")  # WLCG Common JWT Profile, "Signature"
ANY_AUDIENCE = "https://wlcg.cern.ch/jwt/v1/any"  # WLCG Common JWT Profile, "aud"
DEFAULT_OPERATOR_SCOPES = ("compute.create", "compute.modify", "compute.read", "compute.cancel")
DEFAULT_PILOT_SCOPE = "glidein-ext.pilot"


class TokenRefused(Exception):
    """A JWT that identifies nobody here; its message is the one line the caller gets."""


@dataclass(frozen=True)
class TokenIdentity:
    """What a verified token stands for."""

    issuer: str
    subject: str
    operator: bool
    pilot: bool
    site: str | None  # a pilot's site


def looks_like_jwt(token: str) -> bool:
    """Three base64url parts, the first a JSON object (``eyJ``): a JWT, not one of ours."""
    return token.startswith("eyJ") and token.count(".") == 2


class JwksSource:
    """An issuer's public keys by ``kid``: a JWKS file (read once), or a URL fetched when the keys
    are older than ``cache_seconds`` or a ``kid`` is unknown (at most once a minute)."""

    REFETCH_AFTER_MISS = 60.0

    def __init__(
        self,
        *,
        path: str = "",
        url: str = "",
        cache_seconds: float = 3600.0,
        fetch: Callable[[str], bytes] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.url = url
        self.cache_seconds = cache_seconds
        self.fetch = fetch or _fetch_url
        self.clock = clock
        self._keys: dict[str, Any] = {}
        self._fetched_at: float | None = None
        self._lock = threading.Lock()
        if path:
            self._keys = parse_jwks(_read(path), path)

    def key(self, kid: str) -> Any | None:
        if self.path:
            return self._keys.get(kid)
        with self._lock:
            now = self.clock()
            age = None if self._fetched_at is None else now - self._fetched_at
            stale = age is None or age > self.cache_seconds
            missed = kid not in self._keys and (age is None or age > self.REFETCH_AFTER_MISS)
            if stale or missed:
                try:
                    self._keys = parse_jwks(self.fetch(self.url), self.url)
                except (OSError, ConfigError):
                    if self._fetched_at is None:
                        raise TokenRefused(f"cannot fetch the keys of {self.url}") from None
                self._fetched_at = now
            return self._keys.get(kid)


def _read(path: str, what: str = "the JWKS file") -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None


def _fetch_url(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 (an https URL the operator gives)
        data: bytes = answer.read(1 << 20)
        return data


def parse_jwks(data: bytes, where: str) -> dict[str, Any]:
    """kid -> public key of a JWKS document (RFC 7517 section 5); keys without a kid skipped."""
    from jwt import PyJWK
    from jwt.exceptions import PyJWKError

    try:
        document = json.loads(data)
        entries = document["keys"]
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"{where} is not a JWKS document (a JSON object with keys)") from None
    keys: dict[str, Any] = {}
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or "kid" not in entry:
            continue
        try:
            keys[str(entry["kid"])] = PyJWK(entry).key
        except PyJWKError as exc:
            raise ConfigError(f"{where}: key {entry['kid']}: {exc}") from None
    return keys


@dataclass(frozen=True)
class IssuerRules:
    """One issuer's keys and how its tokens map to roles."""

    issuer: str
    keys: JwksSource
    operator_scopes: tuple[str, ...] = DEFAULT_OPERATOR_SCOPES
    operator_subjects: frozenset[str] | None = None  # None: any subject
    pilot_scope: str = DEFAULT_PILOT_SCOPE
    pilot_subjects: frozenset[str] | None = None
    site_claim: str = ""
    sites: Mapping[str, str] = field(default_factory=dict)


class TokenVerifier:
    """A JWT -> TokenIdentity, or TokenRefused with one line."""

    def __init__(
        self,
        audience: str,
        issuers: Sequence[IssuerRules],
        *,
        accept_any_audience: bool = False,
        leeway: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.audience = audience
        self.issuers = {rules.issuer: rules for rules in issuers}
        self.accept_any_audience = accept_any_audience
        self.leeway = leeway
        self.clock = clock

    def verify(self, token: str) -> TokenIdentity:
        import jwt

        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise TokenRefused("the token is not a well-formed JWT") from None
        alg = str(header.get("alg"))
        if alg not in ALGORITHMS:
            raise TokenRefused(
                f"token algorithm {_plain(alg, 20)} is not accepted ({', '.join(ALGORITHMS)})"
            )
        issuer = str(unverified.get("iss", ""))
        rules = self.issuers.get(issuer)
        if rules is None:
            raise TokenRefused(f"token issuer {_plain(issuer, 80)} is not trusted here")
        kid = str(header.get("kid", ""))
        key = rules.keys.key(kid)
        if key is None:
            raise TokenRefused(f"token key {_plain(kid, 60)} is not a key of {issuer}")
        audiences = [self.audience, *([ANY_AUDIENCE] if self.accept_any_audience else [])]
        now = self.clock()
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=audiences,
                issuer=issuer,
                leeway=self.leeway,
                options={
                    "require": ["exp", "iat", "sub", "aud", "iss"],
                    "verify_exp": False,  # checked below against self.clock, with the leeway
                    "verify_nbf": False,
                    "verify_iat": False,
                },
            )
        except jwt.InvalidAudienceError:
            aud = unverified.get("aud")
            raise TokenRefused(
                f"token audience {_plain(str(aud), 80)} is not this Task Queue ({self.audience})"
            ) from None
        except jwt.MissingRequiredClaimError as exc:
            raise TokenRefused(f"token has no {exc.claim} claim") from None
        except jwt.InvalidSignatureError:
            raise TokenRefused(f"token signature does not verify with key {kid!r}") from None
        except jwt.PyJWTError as exc:
            raise TokenRefused(f"token refused: {_plain(str(exc), 120)}") from None
        exp = _number(claims, "exp")
        if now > exp + self.leeway:
            raise TokenRefused(f"token expired at {_utc(exp)}")
        if "nbf" in claims and now + self.leeway < _number(claims, "nbf"):
            raise TokenRefused(f"token not valid before {_utc(_number(claims, 'nbf'))}")
        return self._role(rules, claims)

    def _role(self, rules: IssuerRules, claims: Mapping[str, Any]) -> TokenIdentity:
        subject = str(claims["sub"])
        scopes = str(claims.get("scope", "")).split()
        wants_operator = any(s in rules.operator_scopes for s in scopes)
        wants_pilot = rules.pilot_scope in scopes
        who = f"subject {_plain(subject, 60)} of {rules.issuer}"
        if not wants_operator and not wants_pilot:
            shown = _plain(" ".join(scopes), 80) or "none"
            raise TokenRefused(f"token scopes ({shown}) grant no role at this Task Queue")
        if wants_operator and wants_pilot:
            raise TokenRefused("token holds both operator and pilot scopes: one role per token")
        if wants_operator:
            if rules.operator_subjects is not None and subject not in rules.operator_subjects:
                raise TokenRefused(f"{who} may not hold operator scopes")
            return TokenIdentity(rules.issuer, subject, operator=True, pilot=False, site=None)
        if rules.pilot_subjects is not None and subject not in rules.pilot_subjects:
            raise TokenRefused(f"{who} may not hold the pilot scope")
        site = str(claims.get(rules.site_claim, "")) if rules.site_claim else ""
        site = site or rules.sites.get(subject, "")
        if not site:
            raise TokenRefused(f"pilot token of {who} names no site")
        return TokenIdentity(rules.issuer, subject, operator=False, pilot=True, site=site)


def _plain(value: object, limit: int) -> str:
    """A claim or header value in a message: as it is when short and printable, else cut and
    quoted (``shorten``): a message never carries a whole hostile value."""
    text = str(value)
    return text if len(text) <= limit and text.isprintable() else shorten(text, limit)


def _number(claims: Mapping[str, Any], name: str) -> float:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TokenRefused(f"token claim {name} is not a number")
    return float(value)


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def load_verifier(
    path: str,
    fetch: Callable[[str], bytes] | None = None,
    clock: Callable[[], float] = time.time,
) -> TokenVerifier:
    """The verifier of a ``token_issuers`` file (module docstring); ConfigError naming what is
    wrong."""
    import yaml

    try:
        document = yaml.safe_load(_read(path, "the token_issuers file"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not YAML: {_plain(str(exc), 120)}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: a mapping with audience and issuers is expected")
    audience = document.get("audience")
    if not isinstance(audience, str) or not audience:
        raise ConfigError(f"{path}: audience (this Task Queue's URL or name) is required")
    entries = document.get("issuers")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: issuers: a list of at least one issuer is required")
    base = Path(path).parent
    issuers = [_issuer(entry, base, path, fetch) for entry in entries]
    leeway = document.get("leeway", 30)
    if not isinstance(leeway, (int, float)) or leeway < 0:
        raise ConfigError(f"{path}: leeway must be a number of seconds >= 0")
    return TokenVerifier(
        audience,
        issuers,
        accept_any_audience=bool(document.get("accept_any_audience", False)),
        leeway=float(leeway),
        clock=clock,
    )


def _issuer(
    entry: object, base: Path, path: str, fetch: Callable[[str], bytes] | None
) -> IssuerRules:
    if not isinstance(entry, dict) or not isinstance(entry.get("issuer"), str):
        raise ConfigError(f"{path}: each issuer needs issuer: URL")
    name = entry["issuer"]
    jwks_file, jwks_url = entry.get("jwks_file", ""), entry.get("jwks_url", "")
    if bool(jwks_file) == bool(jwks_url):
        raise ConfigError(f"{path}: issuer {name}: give one of jwks_file and jwks_url")
    if jwks_url and not str(jwks_url).startswith("https://"):
        raise ConfigError(f"{path}: issuer {name}: jwks_url must be https://")
    keys = JwksSource(
        path=str(base / jwks_file) if jwks_file else "",
        url=str(jwks_url),
        cache_seconds=float(entry.get("cache_seconds", 3600)),
        fetch=fetch,
    )

    def names(key: str) -> frozenset[str] | None:
        value = entry.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise ConfigError(f"{path}: issuer {name}: {key} must be a list")
        return frozenset(str(v) for v in value)

    sites = entry.get("sites", {}) or {}
    if not isinstance(sites, dict):
        raise ConfigError(f"{path}: issuer {name}: sites must map subjects to sites")
    operator_scopes = entry.get("operator_scopes", list(DEFAULT_OPERATOR_SCOPES))
    if not isinstance(operator_scopes, list):
        raise ConfigError(f"{path}: issuer {name}: operator_scopes must be a list")
    return IssuerRules(
        issuer=name,
        keys=keys,
        operator_scopes=tuple(str(s) for s in operator_scopes),
        operator_subjects=names("operator_subjects"),
        pilot_scope=str(entry.get("pilot_scope", DEFAULT_PILOT_SCOPE)),
        pilot_subjects=names("pilot_subjects"),
        site_claim=str(entry.get("site_claim", "")),
        sites={str(k): str(v) for k, v in sites.items()},
    )
