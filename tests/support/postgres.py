"""The throw-away PostgreSQL server (glidein_ext.testbed.postgres) as pytest fixtures, for the Task
Queue tests (the store's suite runs on it and on SQLite; the PostgreSQL-only tests use it alone).

Import the ``pg_server`` and ``pg_url`` fixtures into a test module to use them.  One server per
test session, one fresh database per test.  Without the server binaries or the psycopg driver the
tests skip with the reason, or fail when ``GLIDEIN_EXT_REQUIRE_POSTGRES=1`` (CI sets it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NoReturn

import pytest

from glidein_ext.errors import ConfigError
from glidein_ext.testbed import postgres as testbed
from glidein_ext.testbed.postgres import PgServer

REQUIRE_ENV = "GLIDEIN_EXT_REQUIRE_POSTGRES"

__all__ = ["PgServer", "pg_server", "pg_url", "start_pg_server"]


def unavailable(reason: str) -> NoReturn:
    """Fail (CI: ``$GLIDEIN_EXT_REQUIRE_POSTGRES=1``) or skip with ``reason``."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} (and {REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(f"{reason}; set {REQUIRE_ENV}=1 to make this a failure")


def start_pg_server() -> Iterator[PgServer]:
    """Generator behind the ``pg_server`` fixture (skips or fails when PostgreSQL is missing)."""
    servers = testbed.start_pg_server()
    try:
        server = next(servers)
    except ConfigError as exc:  # MissingDependencyError too
        unavailable(str(exc))
    try:
        yield server
    finally:
        servers.close()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One real PostgreSQL server for the session."""
    yield from start_pg_server()


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """A SQLAlchemy URL of a fresh, empty database on the session's PostgreSQL server."""
    return pg_server.create_database()
