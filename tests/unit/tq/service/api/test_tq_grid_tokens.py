"""WLCG Common JWT Profile tokens (tq.service.api.wlcg_tokens): verified offline against the
issuer's keys, mapped to a role by scope and subject, each refusal one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from glidein_ext.errors import ConfigError
from glidein_ext.tq.service.api.auth import Authenticator, Principal, Refusal
from glidein_ext.tq.service.api.wlcg_tokens import (
    JwksSource,
    TokenRefused,
    TokenVerifier,
    load_verifier,
)
from tests.support.jwt_issuer import AUDIENCE, Issuer, issuers_file

PILOT = "glidein-ext.pilot"


@pytest.fixture(scope="module")
def issuer() -> Issuer:
    return Issuer()


@pytest.fixture
def verifier(issuer: Issuer, tmp_path: Path) -> TokenVerifier:
    return load_verifier(
        str(
            issuers_file(
                tmp_path,
                issuer,
                operator_subjects=["alice"],
                site_claim="glidein_site",
                sites={"pilot-of-t2": "T2_MAPPED"},
            )
        )
    )


def test_an_operators_compute_scope_and_a_pilots_scope_map_to_their_roles(
    issuer: Issuer, verifier: TokenVerifier
) -> None:
    found = verifier.verify(issuer.token("compute.read compute.modify"))
    assert (found.operator, found.pilot, found.subject) == (True, False, "alice")
    found = verifier.verify(issuer.token(PILOT, "pilot-x", alg="ES256", glidein_site="T2_XY"))
    assert (found.operator, found.pilot, found.site) == (False, True, "T2_XY")
    # bound by the mapping when the token names no site
    assert verifier.verify(issuer.token(PILOT, "pilot-of-t2")).site == "T2_MAPPED"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda i: i.token("compute.read", exp=int(time.time()) - 3600), "token expired at"),
        (lambda i: i.token("compute.read", nbf=int(time.time()) + 3600), "not valid before"),
        (lambda i: i.token("compute.read", aud="https://other.example"), "audience"),
        (lambda i: i.token("compute.read", iss="https://evil.example/"), "is not trusted here"),
        (lambda i: i.token("compute.read", kid="rotated-away"), "key rotated-away is not a key of"),
        (lambda i: i.forged("none"), "algorithm none is not accepted"),
        (lambda i: i.forged("HS256"), "algorithm HS256 is not accepted"),
        (lambda i: i.token("storage.read:/ offline_access"), "grant no role"),
        (lambda i: i.token("compute.read", subject="mallory"), "may not hold operator scopes"),
        (lambda i: i.token(PILOT, "pilot-nowhere"), "names no site"),
        (lambda i: i.token(f"compute.read {PILOT}"), "one role per token"),
        (lambda i: i.token("compute.read")[:-4] + "AAAA", "signature does not verify"),
    ],
)
def test_each_bad_token_is_refused_with_one_line(
    issuer: Issuer, verifier: TokenVerifier, make: object, message: str
) -> None:
    with pytest.raises(TokenRefused, match=message) as refused:
        verifier.verify(make(issuer))  # type: ignore[operator]
    assert "\n" not in str(refused.value)


def test_a_token_signed_by_another_key_with_a_known_kid_is_refused(
    issuer: Issuer, verifier: TokenVerifier
) -> None:
    other = Issuer()  # same issuer name and kids, other keys
    with pytest.raises(TokenRefused, match="signature does not verify"):
        verifier.verify(other.token("compute.read"))


def test_the_any_audience_only_where_configured(issuer: Issuer, tmp_path: Path) -> None:
    path = issuers_file(tmp_path, issuer)
    token = issuer.token("compute.read", aud="https://wlcg.cern.ch/jwt/v1/any")
    with pytest.raises(TokenRefused, match="audience"):
        load_verifier(str(path)).verify(token)
    document = json.loads(path.read_text())
    document["accept_any_audience"] = True
    path.write_text(json.dumps(document))
    assert load_verifier(str(path)).verify(token).operator


def test_the_authenticator_takes_a_jwt_beside_its_own_tokens(
    issuer: Issuer, verifier: TokenVerifier
) -> None:
    class NoCredentials:
        def credential_by_hash(self, digest: str) -> None:
            return None

    auth = Authenticator("op-secret", "", NoCredentials(), tokens=verifier)
    assert auth.identify(b"op-secret") == Principal(operator=True)
    pilot = auth.identify(issuer.token(PILOT, "p1", glidein_site="T2_XY").encode())
    assert isinstance(pilot, Principal) and pilot.pilot and pilot.site == "T2_XY"
    assert pilot.credential_id is None and "p1 of https://iam.example.org/" in pilot.describe()
    refused = auth.identify(issuer.forged("none").encode())
    assert refused == Refusal(401, "token algorithm none is not accepted (RS256, ES256)")
    # without issuers a JWT is one more unknown token
    plain = Authenticator("op-secret", "", NoCredentials())
    assert isinstance(plain.identify(issuer.token("compute.read").encode()), Refusal)


def test_an_issuer_url_is_fetched_once_and_kept(issuer: Issuer) -> None:
    """Offline: the fetch is the test's; a kid it has not seen is fetched again, once a minute."""
    fetched: list[str] = []
    now = [0.0]

    def fetch(url: str) -> bytes:
        fetched.append(url)
        return json.dumps(issuer.jwks()).encode()

    keys = JwksSource(url="https://iam.example.org/jwk", fetch=fetch, clock=lambda: now[0])
    assert keys.key("rsa1") is not None and keys.key("ec1") is not None
    assert len(fetched) == 1
    assert keys.key("new") is None and len(fetched) == 1  # fetched just now: not again
    now[0] = 61.0
    assert keys.key("new") is None and len(fetched) == 2
    now[0] = 61.0 + 3601.0
    assert keys.key("rsa1") is not None and len(fetched) == 3  # the cache's age

    def down(url: str) -> bytes:
        raise OSError("unreachable")

    with pytest.raises(TokenRefused, match="cannot fetch the keys"):
        JwksSource(url="https://iam.example.org/jwk", fetch=down).key("rsa1")


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"issuers": []}, "audience"),
        ({"audience": AUDIENCE, "issuers": []}, "at least one issuer"),
        ({"audience": AUDIENCE, "issuers": [{"issuer": "x"}]}, "one of jwks_file and jwks_url"),
        (
            {"audience": AUDIENCE, "issuers": [{"issuer": "x", "jwks_url": "http://x/jwk"}]},
            "must be https",
        ),
        ({"audience": AUDIENCE, "issuers": [{"issuer": "x", "jwks_file": "none"}]}, "cannot read"),
    ],
)
def test_a_bad_issuers_file_is_one_config_error(
    tmp_path: Path, document: object, message: str
) -> None:
    path = tmp_path / "issuers.yaml"
    path.write_text(json.dumps(document))
    with pytest.raises(ConfigError, match=message):
        load_verifier(str(path))
