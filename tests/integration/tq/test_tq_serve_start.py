"""``start_tq_serve``, the one start of a ``tq serve`` process (the demo's Task Queue and the
testbed's): a server that exits before binding is one GlideinExtError with its log, and a server
that never answers is stopped, not left running."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from glidein_ext.demos.local_site import start_tq_serve
from glidein_ext.errors import GlideinExtError


def test_a_server_that_exits_is_an_error_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with pytest.raises(GlideinExtError, match=r"(?s)^tq serve did not bind its port: .*no-such"):
        start_tq_serve(
            ["--no-such-flag"], os.environ, log, tmp_path / "port", lambda port: True, log.read_text
        )


def test_a_server_that_never_answers_is_stopped(tmp_path: Path) -> None:
    log, asked = tmp_path / "serve.log", []

    def never(port: int) -> bool:
        asked.append(port)
        return False

    args = ["--database", str(tmp_path / "tq.sqlite"), "--port", "0"]
    env = {**os.environ, "GLIDEIN_EXT_TQ_OPERATOR_TOKEN": "op", "GLIDEIN_EXT_TQ_PILOT_TOKEN": "p"}
    with pytest.raises(GlideinExtError, match=r"^tq serve does not answer: never$"):
        start_tq_serve(args, env, log, tmp_path / "port", never, lambda: "never", timeout=40)
    assert asked and asked[0] > 0  # it bound a port and was asked
    with pytest.raises(ConnectionRefusedError):  # and it is gone
        socket.create_connection(("127.0.0.1", asked[0]), timeout=5).close()
