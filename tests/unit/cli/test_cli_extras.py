"""The command line without the optional extras: `pip install glidein-ext` is the glidein side only.

A command whose module needs a package that is not installed ([tq], [site]) is still listed, and
running it is one line naming the extra; our own broken module is a bug and is not hidden; `tq
serve` refuses an old Python in one line; `--version` needs no installed metadata (the bundle has
none).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from glidein_ext import __version__
from glidein_ext.cli import main


def run_main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(args)
        raise SystemExit(0)
    out, err = capsys.readouterr()
    code = exited.value.code
    return (code if isinstance(code, int) else 1), out, err


@pytest.fixture
def no_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if PyYAML (a [tq] dependency) were not installed."""
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml -> ImportError(name="yaml")
    for name in [n for n in sys.modules if n.split(".")[:3] == ["glidein_ext", "cli", "tq"]]:
        monkeypatch.delitem(sys.modules, name)  # the `tq` commands' package and its modules


@pytest.mark.usefixtures("no_yaml")
def test_a_command_without_its_extra_is_listed_and_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_main(["--help"], capsys)
    assert code == 0
    (line,) = [row for row in out.splitlines() if row.strip().startswith("tq ")]
    assert "unavailable: needs 'yaml'" in line
    assert "  wrapper " in out and "  cron " in out

    for args in (["tq", "serve"], ["tq", "serve", "--help"], ["tq", "status", "--watch"]):
        code, out, err = run_main(args, capsys)
        assert (code, out) == (1, "")
        assert err.splitlines() == [
            "glidein-ext: error: glidein-ext tq needs the Python package 'yaml', not installed "
            "here: pip install '.[tq]' in a glidein-ext checkout (the Task Queue service needs "
            "Python 3.11+)"
        ]


def test_our_own_broken_module_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "glidein_ext.cli.pilotad", None)
    with pytest.raises(ImportError):
        main(["pilot-ad", "--help"])


def test_tq_serve_refuses_an_old_python(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip(
        "yaml"
    )  # the [tq] extra (the bare Python 3.9 of scripts/py39-chroot has none)
    from glidein_ext.cli.tq import service

    monkeypatch.setattr(service, "SERVICE_PYTHON", (sys.version_info[0] + 1, 0))
    code, out, err = run_main(["tq", "serve", "--database", "/nonexistent/tq.sqlite"], capsys)
    assert (code, out) == (2, "")
    version = sys.version.split()[0]
    assert err == f"glidein-ext: error: tq serve needs Python 3.11 or newer (this is {version})\n"


def test_version_needs_no_installed_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["--version"], capsys)
    assert (code, out) == (0, f"glidein-ext {__version__}\n")


@pytest.mark.parametrize("ending", ["returns", "interrupted"])
def test_tq_serve_says_it_stopped_however_the_server_ends_cleanly(
    ending: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A clean stop is one line on stderr whether uvicorn raises the interrupt again after its
    shutdown (KeyboardInterrupt) or the server simply returns."""
    # The service's own modules import uvicorn: the [tq] extra, absent on the bare Python 3.9
    # of scripts/py39-chroot, which tq serve refuses anyway.
    pytest.importorskip("uvicorn")
    from glidein_ext.tq.service import server

    def run_server(*args: object, **kwargs: object) -> None:
        if ending == "interrupted":
            raise KeyboardInterrupt

    monkeypatch.setattr(server, "serve", run_server)
    monkeypatch.setenv("GLIDEIN_EXT_TQ_OPERATOR_TOKEN", "o" * 32)
    code, _, err = run_main(["tq", "serve", "--database", str(tmp_path / "tq.sqlite")], capsys)
    assert code == 0
    assert "Task Queue stopped" in err
