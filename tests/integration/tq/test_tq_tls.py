"""The Task Queue over TLS, against a real `tq serve --tls-cert/--tls-key` with a CA the test makes
(openssl): plain HTTP gets no answer, a client with the wrong CA (or the wrong host name) is refused
in one line, and with the right CA a real pilot runs a task end to end with its own credential,
minted, listed and revoked by the operator's commands over TLS."""

from __future__ import annotations

import http.server
import os
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from glidein_ext.errors import TaskQueueError
from glidein_ext.testbed.tls import Pki, make_pki, openssl_available
from glidein_ext.testbed.tq_server import OPERATOR, PILOT, TqServer
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.service.db import make_engine
from tests.support.cli import operator_env, run_cli

pytestmark = pytest.mark.skipif(not openssl_available(), reason="needs the openssl command")


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``glidein-ext ARGS`` as a process (the operator's environment unless ``env``)."""
    return run_cli(*args, env=env if env is not None else operator_env(), timeout=timeout)


def test_plain_http_to_the_tls_port_gets_no_answer(
    tq_server: Callable[..., TqServer], pki: Pki
) -> None:
    server = tq_server(tls=pki)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        received = b""
        try:
            while chunk := sock.recv(4096):
                received += chunk
        except ConnectionResetError:
            pass
    assert b"HTTP/" not in received and b"ok" not in received
    with pytest.raises(TaskQueueError, match="cannot reach the Task Queue"):
        TqClient(server.url.replace("https://", "http://"), OPERATOR).status()
    assert server.operator().status().workflows == ()  # TLS with the right CA answers
    assert server.healthy() and "Traceback" not in server.log()


def test_a_client_that_does_not_trust_the_server_is_refused_in_one_line(
    tq_server: Callable[..., TqServer], pki: Pki, tmp_path: Path
) -> None:
    server = tq_server(tls=pki)
    # the server's certificate names 127.0.0.1 only: "localhost" is another host name
    cases = [
        (server.url, ["--ca-file", str(pki.wrong_ca)], "unable to get local issuer"),
        (server.url, [], "the system's CA store"),
        (server.url.replace("127.0.0.1", "localhost"), ["--ca-file", str(pki.ca)], "Hostname"),
    ]
    for url, ca, reason in cases:
        done = cli("tq", "status", "--tq", url, *ca)
        assert done.returncode == 1, done
        (line,) = done.stderr.strip().splitlines()
        assert f"the Task Queue at {url} is not trusted" in line and reason in line
    # a pilot does not retry an untrusted server (its --retry-for is 300 s): it stops at once
    workdir = tmp_path / "pilot"
    started = time.monotonic()
    env = {**operator_env(), "GLIDEIN_EXT_TQ_PILOT_TOKEN": "pilot-secret"}
    done = cli(
        *("pilot", "run", "--tq", server.url, "--ca-file", str(pki.wrong_ca)),
        *("--site", "T0", "--workdir", str(workdir), "--min-free-mb", "1"),
        env=env,
    )
    assert done.returncode == 1 and time.monotonic() - started < 30
    assert "is not trusted" in done.stderr.strip().splitlines()[-1]
    assert server.operator().status().pilots == {}


def test_a_real_pilot_runs_a_task_over_tls_with_its_own_credential(
    tq_server: Callable[..., TqServer],
    pki: Pki,
    tmp_path: Path,
    wait_until: Callable[..., Any],
) -> None:
    server = tq_server(tls=pki, pilot_token="")  # no shared pilot token: credentials only
    tls = ("--tq", server.url, "--ca-file", str(pki.ca))
    secrets = tmp_path / "secrets"
    minted = cli(
        "tq",
        "credential",
        "mint",
        "--site",
        "T0",
        "--note",
        "tls",
        "--output-dir",
        str(secrets),
        *tls,
    )
    assert minted.returncode == 0, minted.stderr
    credential_id, path = minted.stdout.split()
    token_file = Path(path)
    assert token_file.stat().st_mode & 0o777 == 0o600 and secrets.stat().st_mode & 0o777 == 0o700
    workflow = tmp_path / "wf.yaml"
    workflow.write_text(
        "name: tls\ntasks:\n"
        "  - name: t0\n    command: \"sh -c 'echo over tls > $TQ_OUTPUTS'\"\n"
        "    outputs: [/store/tls/out.txt]\n"
    )
    assert cli("tq", "submit", str(workflow), *tls).returncode == 0

    # a token file open to others is refused before anything is sent
    loose = tmp_path / "loose"
    loose.write_text(token_file.read_text())
    loose.chmod(0o644)
    pilot_env = {k: v for k, v in os.environ.items() if not k.startswith("GLIDEIN_EXT_")}
    pilot = (
        *("pilot", "run", *tls, "--site", "T0", "--min-free-mb", "1", "--poll", "0.3"),
        *("--se-dir", str(tmp_path / "se"), "--max-tasks", "1", "-v"),
    )
    (tmp_path / "se").mkdir()
    done = cli(*pilot, "--workdir", str(tmp_path / "w0"), "--token-file", str(loose), env=pilot_env)
    assert done.returncode == 2 and "open to group or others (mode 0644)" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1

    # the real one: the credential from its private file, the CA from --ca-file
    done = cli(
        *pilot,
        *("--workdir", str(tmp_path / "w1"), "--token-file", str(token_file)),
        env=pilot_env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "se" / "store" / "tls" / "out.txt").read_text() == "over tls\n"
    status = wait_until(
        lambda: (s := server.operator().status()).workflows[0].tasks["done"] == 1 and s,
        30,
        "the task to be done",
    )
    assert status.completions == 1
    with make_engine(server.database).connect() as conn:
        rows = conn.exec_driver_sql("SELECT credential_id, site, state FROM pilots").all()
    assert [tuple(r) for r in rows] == [(int(credential_id), "T0", "gone")]

    listed = cli("tq", "credential", "list", *tls)
    assert listed.returncode == 0
    (row,) = listed.stdout.strip().splitlines()[1:]
    assert row.split()[:3] == [credential_id, "T0", "valid"] and row.endswith("tls")
    revoked = cli("tq", "credential", "revoke", credential_id, *tls)
    assert revoked.stdout.strip() == f"credential {credential_id} revoked; 0 pilot(s) ended"
    done = cli(
        *pilot, "--workdir", str(tmp_path / "w2"), "--token-file", str(token_file), env=pilot_env
    )
    assert done.returncode == 1 and f"credential {credential_id} is revoked" in done.stderr
    assert len(server.operator().status().pilots["T0"]) == 1  # nothing registered after


def test_the_glidein_agent_facing_an_untrusted_server_says_why_in_one_line_per_lane(
    tq_server: Callable[..., TqServer], pki: Pki, tmp_path: Path
) -> None:
    """`wrapper --agent-only --tq` against an expired certificate, a host name the certificate
    does not name and an untrusted CA: each lane one line with the reason (as `pilot run`
    gives), no traceback, exit 1, nothing registered."""
    server = tq_server(tls=pki)
    expired = _https_server(pki.expired, pki.key)  # tq serve would not pass its own /healthz
    cases = [
        (f"https://127.0.0.1:{expired.server_address[1]}", pki.ca, "certificate has expired"),
        (server.url.replace("127.0.0.1", "localhost"), pki.ca, "Hostname mismatch"),
        (server.url, pki.wrong_ca, "unable to get local issuer"),
    ]
    for index, (url, ca, reason) in enumerate(cases):
        start = tmp_path / f"glidein-{index}"
        start.mkdir()
        env = operator_env(GLIDEIN_EXT_TQ_PILOT_TOKEN=PILOT, GLIDEIN_EXT_TQ_CA_FILE=str(ca))
        done = cli(
            *("wrapper", "--agent-only", "--tq", url, "--site", "T0", "--tq-lanes", "2"),
            *("--start-dir", str(start)),
            env=env,
            timeout=120,
        )
        assert done.returncode == 1, done
        refused = [line for line in done.stderr.splitlines() if "is not trusted" in line]
        assert len(refused) == 2 and all(reason in line for line in refused), done.stderr
        assert len(done.stderr.strip().splitlines()) <= 6, done.stderr
    expired.shutdown()
    expired.server_close()
    assert server.operator().status().pilots == {}


def _https_server(cert: Path, key: Path) -> http.server.ThreadingHTTPServer:
    """An HTTPS server on 127.0.0.1 (port 0) with ``cert``, in a thread of its own; the caller
    shuts it down."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, name="expired-https", daemon=True).start()
    return httpd
