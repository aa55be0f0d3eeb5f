"""``glidein-ext tq serve`` in a subprocess, for tests and benchmarks (never used in production).

The server binds 127.0.0.1 port 0 and writes the port it got to ``--port-file``; ``start`` waits
for that file, then until ``/healthz`` answers.  Its output goes to a log file in its directory.
``stop`` sends SIGTERM, then SIGKILL if it has not exited after a grace period.  A second
``start`` (after ``kill``) reuses the database and the port, as a restarted service would.  With
``tls`` (``glidein_ext.testbed.tls.make_pki``) it serves HTTPS only and its clients trust that CA.
"""

from __future__ import annotations

import http.client
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from glidein_ext.demos.local_site import start_tq_serve
from glidein_ext.procs import Running
from glidein_ext.sandbox.pool import stop_process
from glidein_ext.testbed.tls import Pki
from glidein_ext.tq.client.client import TqClient, tls_context

OPERATOR = "op-secret"
PILOT = "pilot-secret"
START_TIMEOUT = 30.0


def healthz_seconds(host: str, port: int, timeout: float = 60.0) -> float:
    """Seconds one ``GET /healthz`` took on a new connection; it must answer 200."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    start = time.perf_counter()
    try:
        conn.request("GET", "/healthz")
        answer = conn.getresponse()
        answer.read()
    finally:
        conn.close()
    if answer.status != 200:
        raise AssertionError(f"/healthz answered {answer.status}")
    return time.perf_counter() - start


def tq_env(operator: str = OPERATOR, pilot: str = PILOT, **extra: str) -> dict[str, str]:
    """This process's environment with the Task Queue's two tokens, plus ``extra``."""
    return {
        **os.environ,
        "GLIDEIN_EXT_TQ_OPERATOR_TOKEN": operator,
        "GLIDEIN_EXT_TQ_PILOT_TOKEN": pilot,
        **extra,
    }


def settings_env(settings: Mapping[str, str]) -> dict[str, str]:
    """Task Queue settings as the variables ``tq serve`` reads (``$GLIDEIN_EXT_TQ_<NAME>``)."""
    return {f"GLIDEIN_EXT_TQ_{k.upper()}": v for k, v in settings.items()}


class TqServer(Running):
    """One ``tq serve`` process this test (or benchmark) owns.

    ``settings`` become ``$GLIDEIN_EXT_TQ_<NAME>`` (``wait_for_data="3"``); ``args`` are more
    flags (``--sites FILE``); ``env`` more variables; ``database`` a SQLAlchemy URL, by default a
    SQLite file in ``directory``.
    """

    def __init__(
        self,
        directory: Path,
        *,
        database: str | None = None,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        operator_token: str = OPERATOR,
        pilot_token: str = PILOT,
        tls: Pki | None = None,
        **settings: str,
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.database = database or str(directory / "tq.sqlite")
        self.tls = tls
        self.args = tuple(args)
        if tls is not None:
            self.args += ("--tls-cert", str(tls.cert), "--tls-key", str(tls.key))
        self.operator_token = operator_token
        self.pilot_token = pilot_token
        self.env = {
            **tq_env(operator_token, pilot_token, **(env or {})),
            **settings_env(settings),
        }
        self.log_path = directory / "serve.log"
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = START_TIMEOUT) -> TqServer:
        """Start it and wait until it answers; GlideinExtError with its log if it does not."""
        self.process, self.port = start_tq_serve(
            ["--database", self.database, "--port", str(self.port), *self.args],
            self.env,
            self.log_path,
            self.directory / "port",
            self._healthy_at,
            lambda: f"its log:\n{self.log()}",
            timeout,
        )
        return self

    def healthy(self) -> bool:
        return self._healthy_at(self.port)

    def _healthy_at(self, port: int) -> bool:
        try:
            with urllib.request.urlopen(  # noqa: S310
                f"{self._url_at(port)}/healthz", timeout=5, context=self.context
            ) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _url_at(self, port: int) -> str:
        scheme = "http" if self.tls is None else "https"
        return f"{scheme}://127.0.0.1:{port}"

    @property
    def url(self) -> str:
        return self._url_at(self.port)

    @property
    def ca_file(self) -> str | None:
        return None if self.tls is None else str(self.tls.ca)

    @property
    def context(self) -> ssl.SSLContext | None:
        """What a client needs to trust this server (None: plain HTTP)."""
        return None if self.tls is None else tls_context(self.ca_file)

    def operator(self, timeout: float = 30) -> TqClient:
        return TqClient(self.url, self.operator_token, timeout=timeout, ca_file=self.ca_file)

    def pilot(self, timeout: float = 30, token: str | None = None) -> TqClient:
        """A pilot's client: the shared pilot token, or ``token`` (a credential)."""
        return TqClient(self.url, token or self.pilot_token, timeout=timeout, ca_file=self.ca_file)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` and wait for the exit (SIGKILL: a crash the service must ride out)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=30)

    def stop(self, grace: float = 30) -> None:
        """SIGTERM (uvicorn shuts down cleanly), then SIGKILL after ``grace`` seconds."""
        if self.process is not None:
            stop_process(self.process, [(signal.SIGTERM, grace), (signal.SIGKILL, 30)])
