"""Names from pilots, tasks and clients against a real `tq serve`: a site's or host's name is an
identifier at the API, and whatever the operators' commands print or the service logs is escaped
(one line, no terminal control sequence)."""

from __future__ import annotations

import http.client
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest

from glidein_ext.cli import main
from glidein_ext.testbed.tq_server import OPERATOR, PILOT, TqServer
from glidein_ext.tq.client.protocol import Completion, Registration
from glidein_ext.tq.models import MatchSpec
from glidein_ext.tq.service.server import open_store
from glidein_ext.tq.service.settings import TqSettings
from glidein_ext.tq.workflow import TaskDef, WorkflowDef
from tests.support.rawhttp import post_json

HOSTILE = "\x1b]0;owned\x07\x1b[2J\nFORGED line\r\u202e"


@pytest.mark.parametrize(
    "field, value",
    [
        ("site", "T2\x1b[2J"),
        ("site", "T2\nFORGED"),
        ("site", "T2 XY"),
        ("site", "a/b"),
        ("site", "T2:XY"),
        ("site", "T2_\u00e9"),
        ("host", "wn\x1b]0;x\x07"),
        ("host", "wn\u202e1"),
        ("host", "wn:8080"),
    ],
)
def test_site_and_host_names_are_identifiers_at_the_api(
    tq_server: Callable[..., TqServer], field: str, value: str
) -> None:
    server = tq_server()
    pilot = {"site": "T2_US_Nebraska", "host": "wn-01.example.org", field: value}
    code, text = post_json(server.url, "/api/v1/pilots", pilot, PILOT)
    assert code == 422 and field in text and "letters, digits" in text, text
    assert server.operator().status().pilots == {}


def test_identifier_names_are_taken_and_others_refused_everywhere(
    tq_server: Callable[..., TqServer],
) -> None:
    """Registration, minting credentials and the distributed site's path take the same names."""
    server = tq_server()
    good = {"site": "T2_US_Nebraska", "host": "wn-01.example.org"}
    code, text = post_json(server.url, "/api/v1/pilots", good, PILOT)
    assert code == 200, text
    code, text = post_json(server.url, "/api/v1/credentials", {"site": "T2\x1b"}, OPERATOR)
    assert code == 422 and "letters, digits" in text, text
    site = quote("T2\x1b[2J")
    code, text = post_json(server.url, f"/api/v1/sites/{site}/master", {"pilot_id": 1}, PILOT)
    assert code == 422, text


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    try:
        main(argv)
    except SystemExit as exc:
        assert exc.code in (0, None), capsys.readouterr()
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return captured.out


def _older_rows(tmp_path: Path) -> None:
    """A workflow and a pilot with hostile names, stored as an older Task Queue let through (its
    database outlives the API's checks)."""
    directory = tmp_path / "tq"
    directory.mkdir()
    store = open_store(TqSettings(database=str(directory / "tq.sqlite")))
    task = TaskDef("t", "true", MatchSpec())
    store.submit(WorkflowDef(f"w{HOSTILE}", (task,)))
    store.register(Registration(site=f"S{HOSTILE}", host=f"h{HOSTILE}"))
    store.engine.dispose()


def test_tq_status_and_tq_task_print_hostile_names_escaped(
    tmp_path: Path, tq_server: Callable[..., TqServer], capsys: pytest.CaptureFixture[str]
) -> None:
    """A workflow's, a site's and a host's name and a task's report holding terminal escapes and
    line ends print escaped, one line each: no ESC, no BEL, no forged line."""
    _older_rows(tmp_path)
    server = tq_server("tq")
    pilot = server.pilot()
    task = pilot.request(1)
    assert task is not None
    pilot.complete(1, Completion(task.task_id, task.attempt, 3, report=f"r{HOSTILE}"))
    common = ["--tq", server.url, "--token", OPERATOR]
    for argv in (
        ["tq", "status", *common],
        ["tq", "status", "--tasks", *common],
        ["tq", "task", str(task.task_id), *common],
    ):
        out = _cli(argv, capsys)
        assert "\x1b" not in out and "\x07" not in out and "\r" not in out, argv
        assert "\u202e" not in out
        assert not any(line.startswith("FORGED") for line in out.splitlines()), out
        assert "\\x1b]0;owned\\x07" in out, out


def test_the_stuck_watch_and_the_request_log_write_one_line_each(
    tmp_path: Path, tq_server: Callable[..., TqServer]
) -> None:
    """At --log-level debug, a GET whose path holds %0A and a stalled workflow whose name holds
    a newline are logged escaped: no log line of the sender's choosing."""
    _older_rows(tmp_path)
    server = tq_server(
        "tq",
        args=("--log-level", "debug"),
        stuck_interval="1",
        stuck_stalled_after="1",
        stuck_queued_after="1",
    )
    host, port = server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", "/healthz%0AFORGED%20request%1B%5B2J")
        conn.getresponse().read()
    finally:
        conn.close()
    deadline = time.monotonic() + 60
    while "stuck: workflow" not in server.log() or "FORGED request" not in server.log():
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.5)
    log = server.log()
    assert not any(line.startswith("FORGED") for line in log.splitlines()), log
    assert "\x1b" not in log and "\x07" not in log
    assert "\\nFORGED line" in log and "/healthz\\nFORGED request\\x1b[2J" in log


def test_a_glidein_with_a_site_the_task_queue_refuses_stops_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`wrapper --tq` takes the Task Queue's site names only (HTCondor's GLIDEIN_Site would
    take '@', ':' and '+' too): told at once, not by every lane's refused registration."""
    argv = ["wrapper", "--agent-only", "--tq", "http://127.0.0.1:9", "--site", "T2@XY"]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--start-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert exited.value.code not in (0, None) and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert "--site 'T2@XY'" in line and "letters, digits" in line
