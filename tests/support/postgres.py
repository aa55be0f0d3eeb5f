"""A real, throw-away PostgreSQL server for the Task Queue tests (the store's suite runs on it
and on SQLite; the PostgreSQL-only tests use it alone).

Import the ``pg_server`` and ``pg_url`` fixtures into a test module to use them.  One server per
test session (``initdb`` + ``pg_ctl start`` in a fresh temporary directory, on 127.0.0.1 and a
free port, trust authentication), one fresh database per test.  PostgreSQL refuses to run as root,
so under root the server runs as the ``postgres`` user (``runuser``).

Without the server binaries or the psycopg driver the tests skip with the reason, or fail when
``GLIDEIN_EXT_REQUIRE_POSTGRES=1`` (CI sets it).  ``GLIDEIN_EXT_PG_BIN`` names the binaries'
directory if it is not ``/usr/lib/postgresql/<version>/bin``.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import pytest

REQUIRE_ENV = "GLIDEIN_EXT_REQUIRE_POSTGRES"
BIN_ENV = "GLIDEIN_EXT_PG_BIN"
RUN_AS = "postgres"


def unavailable(reason: str) -> NoReturn:
    """Fail (CI: ``$GLIDEIN_EXT_REQUIRE_POSTGRES=1``) or skip with ``reason``."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} (and {REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(f"{reason}; set {REQUIRE_ENV}=1 to make this a failure")


def find_bin_dir() -> Path | None:
    """The directory holding initdb, pg_ctl and postgres, or None."""
    named = os.environ.get(BIN_ENV)
    candidates = (
        [Path(named)]
        if named
        else sorted(
            (Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin")),
            key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
            reverse=True,
        )
    )
    for directory in candidates:
        if all((directory / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return directory
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class PgServer:
    """A running PostgreSQL server this test session owns."""

    bin_dir: Path
    root: Path
    port: int
    user: str = RUN_AS
    _names: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "postgres.log"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", RUN_AS, "--"] if os.geteuid() == 0 else []
        return subprocess.run(
            [*prefix, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
            check=False,
        )

    def init(self) -> None:
        done = self._run(
            str(self.bin_dir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            self.user,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed:\n{done.stdout}\n{done.stderr}")

    def start(self) -> None:
        options = f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c max_connections=200"
        done = self._run(
            str(self.bin_dir / "pg_ctl"),
            "start",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "-o",
            options,
            timeout=90,
        )
        if done.returncode != 0:
            log = self.log.read_text(errors="replace") if self.log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed:\n{done.stdout}\n{done.stderr}\n{log}")

    def stop(self) -> None:
        self._run(str(self.bin_dir / "pg_ctl"), "stop", "-D", str(self.data), "-m", "fast", "-w")

    def create_database(self) -> str:
        """A fresh empty database; its SQLAlchemy URL."""
        import psycopg

        name = f"tq_{next(self._names)}"
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=self.user, dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def start_pg_server() -> Iterator[PgServer]:
    """Generator behind the ``pg_server`` fixture (skips or fails when PostgreSQL is missing)."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        unavailable(f"no PostgreSQL server binaries (initdb, pg_ctl, postgres; see ${BIN_ENV})")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("the psycopg driver is not installed (pip install 'psycopg[binary]>=3.1')")
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam(RUN_AS)
        except KeyError:
            unavailable(f"running as root and there is no {RUN_AS!r} user to run PostgreSQL")
    root = Path(tempfile.mkdtemp(prefix="glidein-ext-pg-"))
    if os.geteuid() == 0:
        os.chown(root, owner.pw_uid, owner.pw_gid)
    server: PgServer | None = None
    try:
        server = PgServer(bin_dir, root, free_port())
        server.init()
        for attempt in range(3):  # the free port may be taken between probe and bind
            try:
                server.start()
                break
            except RuntimeError:
                if attempt == 2:
                    raise
                server.port = free_port()
                time.sleep(0.2)
        yield server
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One real PostgreSQL server for the session."""
    yield from start_pg_server()


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """A SQLAlchemy URL of a fresh, empty database on the session's PostgreSQL server."""
    return pg_server.create_database()
