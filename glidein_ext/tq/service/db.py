"""The database edge: an engine from a URL (SQLite file by default, PostgreSQL by URL), migrations.

SQLite runs in WAL mode with ``synchronous=NORMAL``: a committed transaction survives the TQ process
being killed (SIGKILL), which is the failure the TQ must ride out; a PostgreSQL URL
(``postgresql+psycopg://...``) needs only the driver installed.  On PostgreSQL, several TQ processes
may share one database: migrations are serialised by an advisory lock, and the store hands a task
out with a conditional update (see ``glidein_ext.tq.service.store``).
"""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from glidein_ext.errors import TaskQueueError

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# PostgreSQL advisory lock held while migrating: TQ processes starting together on one database
# upgrade the schema one after the other instead of racing on CREATE TABLE.
MIGRATION_LOCK = 0x7471_6D69  # "tqmi"
NAME_CHARS = 63  # PostgreSQL's NAMEDATALEN - 1: application_name is cut there


def url_for(database: str) -> str:
    """A SQLAlchemy URL: a URL as given, or a plain path for an embedded SQLite file."""
    if "://" in database:
        return database
    return f"sqlite:///{Path(database).expanduser().resolve()}"


def is_pool_url(url: str) -> bool:
    """A database several instances can share (PostgreSQL); SQLite is one instance's."""
    return url.startswith("postgresql")


def instance_name() -> str:
    """This instance's name in a pool (Lee 2003): host, pid and a random tag (unique across
    restarts); its database sessions carry it (``tq.service.pool.notify``)."""
    host = socket.gethostname().split(".")[0][:30]
    return f"tq-{host}-{os.getpid()}-{secrets.token_hex(3)}"[:NAME_CHARS]


def named_url(url: str, name: str) -> str:
    """``url`` whose sessions carry ``application_name=name`` (PostgreSQL only; else as is)."""
    if not is_pool_url(url):
        return url
    parsed = sa.engine.make_url(url).update_query_dict({"application_name": name})
    return parsed.render_as_string(hide_password=False)


def libpq_url(url: sa.engine.URL) -> str:
    """A SQLAlchemy PostgreSQL URL as psycopg takes it (no driver name, no application name)."""
    plain = url.set(drivername="postgresql").difference_update_query(["application_name"])
    return plain.render_as_string(hide_password=False)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def make_engine(database: str) -> Engine:
    """An engine for ``database``; TaskQueueError if the URL or driver is unusable."""
    url = url_for(database)
    try:
        if url.startswith("sqlite"):
            # The store serialises writes, so a few long-lived connections suffice; SQLAlchemy's
            # default overflow would open (and set up) a new SQLite connection per busy request.
            engine = sa.create_engine(
                url,
                connect_args={"check_same_thread": False},
                pool_size=4,
                max_overflow=0,
                pool_timeout=120,
            )
            sa.event.listen(engine, "connect", _sqlite_pragmas)
        else:
            engine = sa.create_engine(url, pool_pre_ping=True)
    except (SQLAlchemyError, ImportError) as exc:
        raise TaskQueueError(f"cannot use database {database!r}: {exc}") from exc
    return engine


def migrate(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision`` with Alembic (idempotent)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    try:
        with engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(sa.select(sa.func.pg_advisory_xact_lock(MIGRATION_LOCK)))
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    except SQLAlchemyError as exc:
        raise TaskQueueError(f"cannot migrate the database: {exc}") from exc
