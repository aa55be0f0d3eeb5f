"""A token issuer made for a test: its own RSA and EC keys, its JWKS, and WLCG Common JWT Profile
tokens signed with them (or forged: ``alg: none``, HS256 keyed with the public key)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

ISSUER = "https://iam.example.org/"
AUDIENCE = "https://tq.example.org:8765"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class Issuer:
    issuer: str = ISSUER
    rsa_key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    ec_key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )

    def jwks(self) -> dict[str, Any]:
        rsa_jwk = json.loads(RSAAlgorithm.to_jwk(self.rsa_key.public_key()))
        ec_jwk = json.loads(ECAlgorithm.to_jwk(self.ec_key.public_key()))
        rsa_jwk.update(kid="rsa1", alg="RS256", use="sig")
        ec_jwk.update(kid="ec1", alg="ES256", use="sig")
        return {"keys": [rsa_jwk, ec_jwk]}

    def write_jwks(self, path: Path) -> Path:
        path.write_text(json.dumps(self.jwks()))
        return path

    def claims(self, scope: str, subject: str = "alice", **extra: Any) -> dict[str, Any]:
        now = int(time.time())
        base = {
            "iss": self.issuer,
            "sub": subject,
            "aud": AUDIENCE,
            "iat": now,
            "nbf": now,
            "exp": now + 600,
            "jti": str(uuid.uuid4()),
            "wlcg.ver": "1.0",
            "scope": scope,
        }
        base.update(extra)
        return base

    def token(self, scope: str, subject: str = "alice", alg: str = "RS256", **extra: Any) -> str:
        key: Any = self.rsa_key if alg == "RS256" else self.ec_key
        kid = extra.pop("kid", "rsa1" if alg == "RS256" else "ec1")
        return jwt.encode(self.claims(scope, subject, **extra), key, alg, headers={"kid": kid})

    def forged(self, alg: str, scope: str = "compute.read") -> str:
        """``alg: none`` (no signature), or HS256 keyed with the RSA public key's PEM."""
        header = _b64(json.dumps({"alg": alg, "typ": "JWT", "kid": "rsa1"}).encode())
        body = _b64(json.dumps(self.claims(scope)).encode())
        signing = f"{header}.{body}".encode()
        if alg == "none":
            return f"{header}.{body}."
        public = self.rsa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return f"{header}.{body}.{_b64(hmac.new(public, signing, hashlib.sha256).digest())}"


def issuers_file(directory: Path, issuer: Issuer, **rules: Any) -> Path:
    """A ``token_issuers`` YAML file for ``issuer`` (its JWKS beside it) with ``rules``."""
    jwks = issuer.write_jwks(directory / "issuer.jwks")
    entry = {"issuer": issuer.issuer, "jwks_file": jwks.name, **rules}
    path = directory / "token-issuers.yaml"
    path.write_text(json.dumps({"audience": AUDIENCE, "issuers": [entry]}))  # JSON is YAML
    return path
