"""The grid's own tokens against a real `tq serve` (token_issuers): an operator's WLCG JWT and a
pilot's JWT are accepted over HTTP, the pilot's only at its site; each bad token is refused with
one line, over HTTP and through the operator's command line."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from glidein_ext.errors import TaskQueueForbidden
from glidein_ext.testbed.tq_server import TqServer
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.protocol import Registration
from tests.support.cli import operator_env, run_cli
from tests.support.jwt_issuer import Issuer, issuers_file

PILOT_SCOPE = "glidein-ext.pilot"


def get(url: str, token: str) -> tuple[int, str]:
    """GET ``url`` with the bearer ``token``: the status and the answer's detail (or body)."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as refused:
        body = refused.read().decode()
        try:
            return refused.code, str(json.loads(body)["detail"])
        except (ValueError, KeyError):
            return refused.code, body


def test_operator_and_pilot_jwts_are_accepted_and_bad_ones_refused(
    tq_server: Callable[..., TqServer], tmp_path: Path
) -> None:
    issuer = Issuer()
    config = tmp_path / "issuers"
    config.mkdir()
    path = issuers_file(config, issuer, operator_subjects=["alice"], site_claim="glidein_site")
    server = tq_server(token_issuers=str(path))
    status = f"{server.url}/api/v1/status"

    # an operator's token (compute.* scopes): the operator's calls
    operator = issuer.token("compute.read compute.modify compute.create")
    assert get(status, operator)[0] == 200
    answer = TqClient(server.url, operator).submit(
        {"name": "w", "tasks": [{"name": "t1", "command": "true"}]}
    )
    assert answer.workflow_id >= 1
    # ... and through the command line
    env = operator_env(GLIDEIN_EXT_TQ_OPERATOR_TOKEN=operator)
    done = run_cli("tq", "status", "--tq", server.url, env=env, timeout=60)
    assert done.returncode == 0, done.stderr

    # a pilot's token bound to T2_XY: registers there, not elsewhere; it is no operator
    pilot = TqClient(server.url, issuer.token(PILOT_SCOPE, "pilot-1", glidein_site="T2_XY"))
    registered = pilot.register(Registration(site="T2_XY", host="wn1"))
    assert registered.pilot_id >= 1
    with pytest.raises(TaskQueueForbidden, match="cannot register a pilot at site 'T2_OTHER'"):
        pilot.register(Registration(site="T2_OTHER", host="wn1"))
    code, detail = get(status, issuer.token(PILOT_SCOPE, "pilot-1", glidein_site="T2_XY"))
    assert (code, detail) == (401, "a valid operator token is required")

    # the bad ones: 401 and one line each
    now = int(time.time())
    bad = {
        "expired": (issuer.token("compute.read", exp=now - 3600), "token expired at"),
        "not yet valid": (issuer.token("compute.read", nbf=now + 3600), "not valid before"),
        "audience": (issuer.token("compute.read", aud="https://x.example"), "audience"),
        "issuer": (issuer.token("compute.read", iss="https://x.example/"), "not trusted here"),
        "kid": (issuer.token("compute.read", kid="k9"), "key k9 is not a key of"),
        "none": (issuer.forged("none"), "algorithm none is not accepted"),
        "hs256": (issuer.forged("HS256"), "algorithm HS256 is not accepted"),
        "scope": (issuer.token("storage.read:/"), "grant no role"),
        "subject": (issuer.token("compute.read", subject="mallory"), "may not hold operator"),
    }
    for name, (token, message) in bad.items():
        code, detail = get(status, token)
        assert code == 401 and message in detail and "\n" not in detail, (name, detail)
    # the operator's command line says it in one line, exit non-zero
    expired = bad["expired"][0]
    done = run_cli(
        "tq",
        "status",
        "--tq",
        server.url,
        env=operator_env(GLIDEIN_EXT_TQ_OPERATOR_TOKEN=expired),
        timeout=60,
    )
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) == 1 and "token expired at" in done.stderr
    # the project's own tokens still work beside them
    assert server.operator().status() is not None


def test_tq_serve_with_a_broken_token_issuers_file_says_so_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.yaml"
    env = operator_env(GLIDEIN_EXT_TQ_TOKEN_ISSUERS=str(missing))
    args = ("tq", "serve", "--database", str(tmp_path / "tq.sqlite"), "--port", "0")
    done = run_cli(*args, env=env, timeout=60)
    assert done.returncode == 1
    cause = f"cannot read the token_issuers file {missing}: No such file or directory"
    assert done.stderr.strip().splitlines() == [f"glidein-ext: error: {cause}"]
    assert "listening" not in done.stdout + done.stderr
