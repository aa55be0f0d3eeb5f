"""A real, throw-away PostgreSQL server: ``initdb`` + ``pg_ctl start`` in a fresh temporary
directory, on 127.0.0.1 and a free port, trust authentication; one fresh database per caller
(``create_database``).  PostgreSQL refuses to run as root, so under root the server runs as the
``postgres`` user (``runuser``).  ``GLIDEIN_EXT_PG_BIN`` names the binaries' directory if it is
not ``/usr/lib/postgresql/<version>/bin``.

``start_pg_server`` raises MissingDependencyError without the server binaries or the psycopg
driver (ConfigError: as root, without a ``postgres`` user); the tests' fixtures
(tests/support/postgres.py) turn that into a skip, or a failure under
``GLIDEIN_EXT_REQUIRE_POSTGRES=1``; bench/pool_bench.py into its one-line error.
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
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from glidein_ext.errors import ConfigError, MissingDependencyError

BIN_ENV = "GLIDEIN_EXT_PG_BIN"
RUN_AS = "postgres"


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
    """A running PostgreSQL server its caller owns."""

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


def start_pg_server() -> Generator[PgServer, None, None]:
    """A started server, stopped and removed when the generator closes (the ``pg_server``
    fixture; ``contextlib.contextmanager(start_pg_server)()`` elsewhere)."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise MissingDependencyError(
            f"no PostgreSQL server binaries (initdb, pg_ctl, postgres; see ${BIN_ENV})"
        )
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise MissingDependencyError(
            "the psycopg driver is not installed (pip install 'psycopg[binary]>=3.1')"
        ) from None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam(RUN_AS)
        except KeyError:
            raise ConfigError(
                f"running as root and there is no {RUN_AS!r} user to run PostgreSQL"
            ) from None
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
