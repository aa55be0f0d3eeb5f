"""Hostile input to `glidein-ext tq ...` and `glidein-ext pilot run`: each
is refused with one line and a non-zero exit, never a traceback, quickly and in little memory."""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from glidein_ext.cli import main
from glidein_ext.testbed.tq_server import OPERATOR, PILOT, TqServer

# 462 bytes that expand to 9^9 strings: 28 s and 2.2 GB before MemoryError.
ALIAS_BOMB = (
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
    "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
    "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
    "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
    "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
    "h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"
    "name: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n"
    "tasks: [{name: t, command: true}]\n"
)
SITES_BOMB = ALIAS_BOMB.replace("name: &i", "sites: &i").replace(
    "tasks: [{name: t, command: true}]\n", ""
)

FILES: dict[str, Callable[[Path], object]] = {
    "alias bomb.yaml": lambda p: p.write_text(ALIAS_BOMB),
    "one alias.yaml": lambda p: p.write_text(
        "defaults: &d {command: 'true'}\ntasks: [{name: t, <<: *d}]\n"
    ),
    "nested.yaml": lambda p: p.write_text("tasks: " + "[" * 5000 + "]" * 5000 + "\n"),
    "nested.json": lambda p: p.write_text('{"tasks": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    "latin1.yaml": lambda p: p.write_bytes(
        "tasks: [{name: t\xe9, command: true}]\n".encode("latin-1")
    ),
    "huge int.yaml": lambda p: p.write_text(
        f"tasks: [{{name: t, command: c, step: {'9' * 5000}}}]\n"
    ),
    "huge int.json": lambda p: p.write_text(
        '{"tasks": [{"name": "t", "step": ' + "9" * 5000 + "}]}"
    ),
    "too big.yaml": lambda p: p.write_bytes(b"#" * (32 * 2**20 + 10)),
    "list.yaml": lambda p: p.write_text("- 1\n- 2\n"),
    "int keys.yaml": lambda p: p.write_text("1: x\nname: w\ntasks: [{name: t, command: c}]\n"),
    "mixed keys.yaml": lambda p: p.write_text("tasks: [{name: t, command: c, 1: x, b: y}]\n"),
    "date.yaml": lambda p: p.write_text(
        "tasks: [{name: t, command: c, attributes: {D: 2024-01-01}}]\n"
    ),
    "binary.yaml": lambda p: p.write_text("tasks: [{name: !!binary aGVsbG8=, command: c}]\n"),
    "set.yaml": lambda p: p.write_text("tasks: [{name: t, command: c, inputs: !!set {a: null}}]\n"),
    "long value.yaml": lambda p: p.write_text(
        f"tasks: [{{name: t, command: c, step: '{'x' * 100_000}'}}]\n"
    ),
    "bad LFN.yaml": lambda p: p.write_text(
        'tasks: [{name: t, command: c, outputs: ["/a/\\0b"]}]\n'
    ),
    "python tag.yaml": lambda p: p.write_text("tasks: !!python/object:os.system {}\n"),
}


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Exit code and stderr of ``glidein-ext ARGV`` in process; a traceback fails the test."""
    try:
        main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    else:
        code = 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def _one_line_error(code: int, err: str) -> None:
    """A non-zero exit and one line; or click's usage error (usage, hint, one ``Error:`` line)."""
    assert code != 0
    lines = [line for line in err.strip().splitlines() if line]
    if lines and lines[0].startswith("Usage: "):
        lines = [line for line in lines if line.startswith("Error: ")]
    assert len(lines) == 1, err[:2000]
    assert len(lines[0]) < 600, lines[0][:2000]


@pytest.mark.parametrize("name", sorted(FILES))
def test_tq_submit_refuses_hostile_workflow_files_in_one_line(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / name.replace(" ", "_")
    FILES[name](path)
    monkeypatch.setenv("GLIDEIN_EXT_TQ_OPERATOR_TOKEN", OPERATOR)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    code, err = _run(["tq", "submit", str(path), "--tq", "http://127.0.0.1:9"], capsys)
    assert time.monotonic() - started < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KB
    _one_line_error(code, err)
    assert "cannot reach" not in err  # refused before anything is sent


def test_the_sites_file_refuses_aliases_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sites = tmp_path / "sites.yaml"
    sites.write_text(SITES_BOMB)
    started = time.monotonic()
    code, err = _run(["tq", "monitor", "--sites", str(sites), "--once", "--dry-run"], capsys)
    assert time.monotonic() - started < 5
    _one_line_error(code, err)
    assert "aliases" in err


NOWHERE = "http://127.0.0.1:9"  # no Task Queue listens there
PILOT_RUN = ["pilot", "run", "--tq", NOWHERE, "--site", "S"]
BAD_ARGS = {
    "generate scale 1e9": ["tq", "generate", "w1", "--scale", "1e9"],
    "generate scale nan": ["tq", "generate", "w1", "--scale", "nan"],
    "generate scale inf": ["tq", "generate", "w1", "--scale", "inf"],
    "generate sleep nan": ["tq", "generate", "w1", "--sleep", "nan"],
    "generate size -1": ["tq", "generate", "w1", "--size", "-1"],
    "status watch -1": ["tq", "status", "--watch", "-1", "--tq", NOWHERE],
    "status watch nan": ["tq", "status", "--watch", "nan", "--tq", NOWHERE],
    "status bad IPv6 URL": ["tq", "status", "--tq", "http://[::1"],
    "status bad port": ["tq", "status", "--tq", "http://127.0.0.1:port"],
    "status not a URL": ["tq", "status", "--tq", "notaurl"],
    "status token with a newline": ["tq", "status", "--tq", NOWHERE, "--token", "a\nb"],
    "serve port 70000": ["tq", "serve", "--port", "70000"],
    "serve monitor interval": ["tq", "serve", "--monitor-interval", "soon"],
    "monitor no once": ["tq", "monitor", "--sites", "/nonexistent"],
    "monitor missing sites": ["tq", "monitor", "--sites", "/nonexistent", "--once"],
    "pilot bad URL": ["pilot", "run", "--tq", "http://[::1", "--site", "S", "--retry-for", "1"],
    "pilot unreachable": [*PILOT_RUN, "--retry-for", "0.5"],
    "pilot cpus 0": [*PILOT_RUN, "--cpus", "0"],
    "pilot poll nan": [*PILOT_RUN, "--poll", "nan"],
    "pilot retry-for -1": [*PILOT_RUN, "--retry-for", "-1"],
    "pilot max-idle nan": [*PILOT_RUN, "--max-idle", "nan"],
    "pilot ttl -1": [*PILOT_RUN, "--ttl", "-1"],
    "pilot max-tasks -1": [*PILOT_RUN, "--max-tasks", "-1"],
    "pilot cache size": [*PILOT_RUN, "--cache-max-space", "lots"],
    "pilot workdir in /proc": [*PILOT_RUN, "--workdir", "/proc/1/nope"],
    "pilot workdir a file": [*PILOT_RUN, "--workdir", "/etc/hostname"],
}


@pytest.mark.parametrize("case", sorted(BAD_ARGS))
def test_hostile_command_lines_are_one_line_errors(
    tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GLIDEIN_EXT_TQ_OPERATOR_TOKEN", OPERATOR)
    monkeypatch.setenv("GLIDEIN_EXT_TQ_PILOT_TOKEN", PILOT)
    monkeypatch.chdir(tmp_path)
    argv = list(BAD_ARGS[case])
    if argv[:2] == ["pilot", "run"]:
        if "--workdir" not in argv:
            argv += ["--workdir", str(tmp_path / "w"), "--min-free-mb", "0"]
        if "--retry-for" not in argv:
            argv += ["--retry-for", "1"]
    started = time.monotonic()
    code, err = _run(argv, capsys)
    assert time.monotonic() - started < 10
    _one_line_error(code, err)


REFUSED_PILOTS = {
    "requirements cut short": ["--requirements", "TARGET.Site == "],
    "rank unparsable": ["--rank", "1 +"],
    "ttl of 10^30": ["--ttl", str(10**30)],
    "cpus of 2^63": ["--cpus", str(2**63)],
    "site with a NUL": ["--site", "S\x00"],  # click passes it through from a Python caller
}


def test_pilot_run_refused_by_the_task_queue_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen from the pilot: a registration the TQ refuses (422) ends the pilot with
    one line, stores no ghost pilot, and the TQ still restarts."""
    monkeypatch.setenv("GLIDEIN_EXT_TQ_PILOT_TOKEN", PILOT)
    with TqServer(tmp_path / "tq") as server:
        for case, extra in sorted(REFUSED_PILOTS.items()):
            argv = ["pilot", "run", "--tq", server.url, "--site", "S", "--retry-for", "2"]
            argv += ["--workdir", str(tmp_path / case.replace(" ", "_")), "--min-free-mb", "0"]
            code, err = _run([*argv, *extra], capsys)
            _one_line_error(code, err)
            assert "Traceback" not in server.log(), case
        assert server.operator().status().pilots == {}
    with TqServer(tmp_path / "tq") as again:
        assert again.healthy()
