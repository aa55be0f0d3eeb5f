"""Packaging: `pip install glidein-ext` is the glidein side only; `[tq]` runs the Task Queue.

The wheel is built from this checkout (pip, build isolation) and installed with pip from the
package index into fresh venvs: plain, where no server dependency may appear and the glidein's
commands work, and with `[tq]`, where `tq serve` starts and answers.  pip's cache keeps repeated
runs quick (about 20 s for both).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from glidein_ext.sandbox.pool import stop_process

REPO = Path(__file__).resolve().parents[2]
SERVER_PACKAGES = ["fastapi", "uvicorn", "sqlalchemy", "alembic", "psycopg", "pydantic", "yaml"]
SERVER_DISTS = {"fastapi", "uvicorn", "sqlalchemy", "alembic", "psycopg", "pydantic", "pyyaml"}


# A fresh venv's environment: not this checkout's package (PYTHONPATH would show pip the tree's
# build metadata as glidein-ext installed already).
CLEAN_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def run(*args: str | Path, timeout: float = 600) -> str:
    proc = subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=CLEAN_ENV,
    )
    assert proc.returncode == 0, f"{args}: {proc.stderr[-2000:]}"
    return proc.stdout


def fresh_clone(where: Path) -> Path:
    """The checkout's files as a fresh clone has them (tracked and not ignored; no build output)."""
    listed = run("git", "-C", REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, where / name)
    return where


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # From a copy of the checkout's files: setuptools writes build/ and *.egg-info where it builds.
    clone = fresh_clone(tmp_path_factory.mktemp("clone"))
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, clone)
    (built,) = out.glob("glidein_ext-*.whl")
    return built


def venv(where: Path) -> Path:
    run(sys.executable, "-m", "venv", where)
    return where / "bin"


def healthz(port: int) -> int | None:
    """The status of GET /healthz, or None while the server does not answer yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as reply:
            return int(reply.status)
    except OSError:  # not listening yet (URLError is an OSError): the caller polls again
        return None


def metadata(wheel: Path) -> tuple[str, list[str]]:
    """Requires-Python and the Requires-Dist lines of the wheel."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(archive.read(name).decode())
    return message["Requires-Python"], message.get_all("Requires-Dist") or []


def test_wheel_metadata_and_contents(wheel: Path) -> None:
    requires_python, requires = metadata(wheel)
    assert requires_python == ">=3.9"
    base = sorted(r for r in requires if "extra ==" not in r)
    assert base == ["click>=8.1", "watchdog>=3.0"]
    tq = {r.split(";")[0].split(">")[0].split("[")[0] for r in requires if 'extra == "tq"' in r}
    assert SERVER_DISTS | {"htcondor", "numpy", "scipy"} <= tq
    site = [r.split(";")[0] for r in requires if 'extra == "site"' in r]
    assert site == ["htcondor>=23.0"]
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for data in (
        "glidein_ext/condor_config.d/50-glidein-ext-glidein.config",
        "glidein_ext/condor_config.d/60-glidein-ext-site.config",
        "glidein_ext/frontend/glidein-ext-frontend.xml",
        "glidein_ext/tq/service/migrations/env.py",
        "glidein_ext/tq/service/migrations/versions/0001_initial.py",
        "glidein_ext/py.typed",
    ):
        assert data in names, data
    assert not [n for n in names if n.startswith("tests/")]
    assert not [n for n in names if n.startswith("glidein_ext/testbed/")]  # a checkout's only


def test_plain_install_is_the_glidein_side_only(wheel: Path, tmp_path: Path) -> None:
    bin_dir = venv(tmp_path / "venv")
    run(bin_dir / "pip", "install", "-q", wheel)
    installed = json.loads(run(bin_dir / "pip", "list", "--format", "json"))
    names = {p["name"].lower() for p in installed}
    assert {"glidein-ext", "click", "watchdog"} <= names
    assert not names & (SERVER_DISTS | {"htcondor", "numpy", "scipy", "psutil"})
    for module in SERVER_PACKAGES:
        probe = subprocess.run(
            [bin_dir / "python", "-c", f"import {module}"],
            capture_output=True,
            check=False,
            env=CLEAN_ENV,
            cwd=tmp_path,
        )
        assert probe.returncode != 0, module

    command = bin_dir / "glidein-ext"
    listing = run(command, "--help")
    for name in ("wrapper", "cron", "hook", "pilot-ad", "site-ad", "pilot", "dht", "cache", "tq"):
        assert f"  {name} " in listing, name
    assert "needs 'yaml'" in listing  # tq: listed, marked unavailable
    # The glidein's commands work: init, the cron, pilot-ad.
    start = tmp_path / "start"
    start.mkdir()
    run(command, "init", "--start-dir", start, "--cpus", "2")
    assert "GLIDEIN_RetireNow = false" in run(command, "cron", "--start-dir", start)
    assert '"USED_FRACTION1k": 0' in run(command, "pilot-ad", "show", start, "--json")
    # The site's propagate cron needs nothing beyond the base install.
    execute = tmp_path / "execute"
    execute.mkdir()
    assert "GLIDEIN_EXT_SITE_CRON_OK = true" in run(
        command, "site", "propagate", "--execute-dir", execute
    )
    # A command whose extra is missing: one line naming the extra, exit 1, no traceback.
    for args, extra in ((["tq", "serve", "--help"], "[tq]"), (["site", "status"], "[site]")):
        proc = subprocess.run(
            [command, *args], capture_output=True, text=True, check=False, env=CLEAN_ENV
        )
        assert proc.returncode == 1, proc.stderr
        assert len(proc.stderr.splitlines()) == 1 and extra in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def serves(bin_dir: Path, tmp_path: Path, base_env: dict[str, str] | None = None) -> None:
    """`tq serve --help`, then `tq serve` of this venv starts, answers /healthz and stops."""
    base = CLEAN_ENV if base_env is None else base_env
    help_text = subprocess.run(
        [bin_dir / "glidein-ext", "tq", "serve", "--help"],
        env=base,
        capture_output=True,
        text=True,
        check=False,
    )
    assert help_text.returncode == 0 and "--database" in help_text.stdout, help_text.stderr
    port_file = tmp_path / "port"
    env = {
        **base,
        "GLIDEIN_EXT_TQ_OPERATOR_TOKEN": "op-secret",
        "GLIDEIN_EXT_TQ_PILOT_TOKEN": "pilot-secret",
    }
    with open(tmp_path / "serve.log", "wb") as log:
        server = subprocess.Popen(
            [
                bin_dir / "glidein-ext",
                "tq",
                "serve",
                "--database",
                tmp_path / "tq.sqlite",
                "--port",
                "0",
                "--port-file",
                port_file,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 60
        answer = None
        while answer is None:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            if port_file.exists():  # renamed into place once the port is bound
                answer = healthz(int(port_file.read_text()))
            time.sleep(0.2)
        assert answer == 200
    finally:
        stop_process(server, [(signal.SIGTERM, 30), (signal.SIGKILL, 30)])
    assert "Task Queue listening on" in (tmp_path / "serve.log").read_text()


def test_tq_extra_runs_the_task_queue(wheel: Path, tmp_path: Path) -> None:
    bin_dir = venv(tmp_path / "venv")
    run(bin_dir / "pip", "install", "-q", f"{wheel}[tq]")
    serves(bin_dir, tmp_path)


def readme_install_line() -> list[str]:
    """The README's `pip install` line for the Task Queue, as a command (its comment dropped)."""
    for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("pip install") and "[tq]" in line:
            return shlex.split(line.partition("#")[0])
    raise AssertionError("README.md has no `pip install ...[tq]` line")


def test_the_readmes_install_line_works_as_written_in_a_fresh_clone(tmp_path: Path) -> None:
    """glidein-ext is in no package index: the README says to install from the checkout."""
    command = readme_install_line()
    assert command == ["pip", "install", ".[tq]"]
    clone = fresh_clone(tmp_path / "clone")
    bin_dir = venv(tmp_path / "venv")
    env = {**CLEAN_ENV, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        [*command, "-q"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    probe: list[str | Path] = [
        bin_dir / "python",
        "-c",
        "import glidein_ext; print(glidein_ext.__file__)",
    ]
    where = subprocess.run(
        probe, cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    ).stdout
    assert where.startswith(str(tmp_path / "venv")), where
    serves(bin_dir, tmp_path, env)
