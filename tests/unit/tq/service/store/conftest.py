"""The store on SQLite and PostgreSQL, for the site calls' tests (``store_for``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from glidein_ext.tq.service.db import make_engine, migrate
from glidein_ext.tq.service.store import Store
from tests.support.clock import Clock
from tests.support.postgres import pg_server, pg_url

__all__ = ["pg_server", "pg_url"]  # fixtures, used by name


@pytest.fixture(params=["sqlite", "postgresql"])
def store_for(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Store]]:
    database = str(tmp_path / "tq.sqlite")
    if request.param == "postgresql":
        database = request.getfixturevalue("pg_url")
    engines: list[sa.Engine] = []

    def open_(clock: Clock, **options: Any) -> Store:
        engine = make_engine(database)
        engines.append(engine)
        migrate(engine)
        store = Store(engine, clock=clock, master_timeout=5, **options)
        store.load()
        return store

    yield open_
    for engine in engines:
        engine.dispose()
