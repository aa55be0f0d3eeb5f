"""What a new user types and what it answers: `tq serve` on a database it cannot use (one line
naming the path and the cause), Ctrl-C on `tq serve` (a clean stop), `tq generate -o` into a
missing directory, `tq status WORKFLOW`, and a pilot's own --ttl and --requirements refused before
it calls the Task Queue."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from glidein_ext.errors import ConfigError
from glidein_ext.testbed.tq_server import PILOT, TqServer
from glidein_ext.tq.service.server import check_sqlite_file
from tests.support.cli import operator_env, run_cli

NOWHERE = "http://127.0.0.1:9"  # no Task Queue listens there
# Root reads and writes any file whatever its mode (the capabilities CAP_DAC_OVERRIDE and
# CAP_DAC_READ_SEARCH): as root, the tests of a file's mode run the command without them, still
# root and the file's owner, so the mode applies as it does to an ordinary user's own file.
AS_ROOT = os.geteuid() == 0
DAC_CAPS = "-dac_override,-dac_read_search"
WITHOUT_ROOT_POWERS = ("setpriv", f"--bounding-set={DAC_CAPS}", f"--inh-caps={DAC_CAPS}", "--")


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def _serve(database: Path, wrapper: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    serve = ("tq", "serve", "--database", str(database), "--port", "0")
    return run_cli(*serve, env=operator_env(), wrapper=wrapper)


@pytest.fixture
def file_modes_apply() -> tuple[str, ...]:
    """The wrapper under which a file's mode binds the command: none for an ordinary user;
    for root, ``setpriv`` dropping the capabilities that override it (the test below checks
    that root then cannot read a file of mode 000)."""
    if not AS_ROOT:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("as root, the mode tests need setpriv (util-linux) to drop CAP_DAC_OVERRIDE")
    return WITHOUT_ROOT_POWERS


@pytest.fixture
def locked_away(tmp_path: Path) -> Iterator[Path]:
    """A directory whose modes the test changes: given back its mode for the cleanup."""
    yield tmp_path
    for path in tmp_path.rglob("*"):
        path.chmod(stat.S_IRWXU)


def test_serve_under_a_missing_directory_names_the_directory(tmp_path: Path) -> None:
    line = _one_line(_serve(tmp_path / "missing" / "tq.sqlite"))
    assert f"{tmp_path / 'missing'} does not exist" in line
    assert "lock file" not in line


def test_serve_on_a_directory_says_it_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / "tq.sqlite").mkdir()
    line = _one_line(_serve(tmp_path / "tq.sqlite"))
    assert f"{tmp_path / 'tq.sqlite'} is a directory" in line
    assert "sqlite3" not in line and "sqlalche" not in line


def test_serve_on_an_unreadable_database_names_it(
    locked_away: Path, file_modes_apply: tuple[str, ...]
) -> None:
    database = locked_away / "tq.sqlite"
    database.write_bytes(b"")
    database.chmod(0)
    line = _one_line(_serve(database, file_modes_apply))
    assert f"the database {database}: cannot read it: Permission denied" in line


def test_serve_on_a_read_only_database_names_it(
    locked_away: Path, file_modes_apply: tuple[str, ...]
) -> None:
    database = locked_away / "tq.sqlite"
    database.write_bytes(b"")
    database.chmod(stat.S_IRUSR)
    line = _one_line(_serve(database, file_modes_apply))
    assert f"the database {database}: cannot write it: Permission denied" in line


def test_without_root_powers_root_obeys_a_file_mode(
    locked_away: Path, file_modes_apply: tuple[str, ...]
) -> None:
    """The wrapper the two tests above run under does bind a file's mode (for root, the
    capabilities are gone), and the file itself is readable otherwise."""
    secret = locked_away / "secret"
    secret.write_text("x", encoding="utf-8")
    secret.chmod(0)
    refused = subprocess.run(
        [*file_modes_apply, "cat", str(secret)], capture_output=True, text=True, check=False
    )
    assert refused.returncode != 0 and "Permission denied" in refused.stderr
    secret.chmod(stat.S_IRUSR)
    read = subprocess.run(
        [*file_modes_apply, "cat", str(secret)], capture_output=True, text=True, check=False
    )
    assert (read.returncode, read.stdout) == (0, "x")


@pytest.mark.parametrize(("refused", "verb"), [(os.O_RDONLY, "read"), (os.O_RDWR, "write")])
def test_a_database_the_system_refuses_is_named_with_the_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refused: int, verb: str
) -> None:
    """What a non-root user sees on a mode 000 or read-only file, wherever the tests run."""
    database = tmp_path / "tq.sqlite"
    database.write_bytes(b"")
    real_open = os.open

    def open_refusing(path: Any, flags: int, *args: Any) -> int:
        if flags == refused:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", open_refusing)
    with pytest.raises(ConfigError) as refusal:
        check_sqlite_file(f"sqlite:///{database}")
    assert str(refusal.value) == f"the database {database}: cannot {verb} it: Permission denied"


def test_ctrl_c_on_serve_is_a_clean_stop(tq_server: Callable[..., TqServer]) -> None:
    server = tq_server()
    server.kill(signal.SIGINT)
    assert server.process is not None
    assert server.process.returncode == 0, server.log()
    assert "Aborted" not in server.log()
    assert "Task Queue stopped" in server.log()


def test_generate_into_a_missing_directory_is_one_line() -> None:
    line = _one_line(run_cli("tq", "generate", "w1", "-o", "/nonexistent/dir/x.yaml", env={}))
    assert line == (
        "glidein-ext: error: cannot write /nonexistent/dir/x.yaml: No such file or directory"
    )


def test_status_of_one_workflow_shows_it_or_says_it_does_not_exist(
    tq_server: Callable[..., TqServer],
) -> None:
    server = tq_server()
    client = server.operator()
    for name in ("first", "second"):
        client.submit({"name": name, "tasks": [{"name": "t", "command": "true"}]})
    shown = run_cli("tq", "status", "2", "--tq", server.url, env=operator_env())
    assert shown.returncode == 0, shown.stderr
    assert "second" in shown.stdout and "first" not in shown.stdout
    missing = run_cli("tq", "status", "99", "--tq", server.url, env=operator_env())
    assert _one_line(missing) == "glidein-ext: error: workflow 99 does not exist"


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--ttl", "-5"], "--ttl"),
        (["--requirements", "TARGET.Memory >"], "--requirements"),
        (["--rank", "1 +"], "--rank"),
    ],
)
def test_pilot_refuses_its_own_bad_ad_before_calling(
    tmp_path: Path, flags: list[str], named: str
) -> None:
    done = run_cli(
        *("pilot", "run", "--tq", NOWHERE, "--site", "S", "--retry-for", "30"),
        *("--workdir", str(tmp_path / "w"), "--min-free-mb", "0", *flags),
        env=operator_env(GLIDEIN_EXT_TQ_PILOT_TOKEN=PILOT),
        timeout=20,
    )
    line = _one_line(done)
    assert named in line and "cannot reach" not in line
    assert done.returncode == 2


@pytest.mark.parametrize("silent", ["7", "30"])
def test_serve_refuses_a_silent_pilot_warning_within_the_heartbeat(
    tmp_path: Path, silent: str
) -> None:
    """A busy pilot calls every heartbeat_interval (30 s): silent for 7 s is no warning."""
    done = run_cli(
        *("tq", "serve", "--database", str(tmp_path / "tq.sqlite"), "--port", "0"),
        env=operator_env(GLIDEIN_EXT_TQ_STUCK_SILENT_AFTER=silent),
    )
    line = _one_line(done)
    assert f"stuck_silent_after ({silent} s) must be more than heartbeat_interval (30 s)" in line
