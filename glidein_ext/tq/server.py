"""Run the Task Queue: database, migrations, store, API, and the reaper of lapsed pilots.

The server binds its own socket (so port 0 works and the bound port is known before serving),
writes it to ``port_file`` if asked, and stops on SIGINT/SIGTERM.  The reaper is one asyncio task
owned by the application's lifespan.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from glidein_ext.errors import ConfigError
from glidein_ext.tq.api import create_app
from glidein_ext.tq.db import make_engine, migrate
from glidein_ext.tq.models import CacheMode
from glidein_ext.tq.settings import TqSettings
from glidein_ext.tq.store import Store


def open_store(settings: TqSettings) -> Store:
    """Engine, migrations, and the store rebuilt from the database."""
    engine = make_engine(settings.database)
    migrate(engine)
    store = Store(
        engine,
        wait_for_data=settings.wait_for_data,
        heartbeat_timeout=settings.heartbeat_timeout,
        cache_mode=CacheMode(settings.cache_mode),
    )
    store.load()
    return store


def build_app(store: Store, settings: TqSettings) -> FastAPI:
    """The API plus a lifespan that owns the reaper task."""
    app = create_app(store, settings)

    async def reaper() -> None:
        while True:
            await asyncio.sleep(settings.reap_interval)
            await asyncio.to_thread(store.reap)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(reaper(), name="tq-reaper")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app.router.lifespan_context = lifespan
    return app


def bind(host: str, port: int) -> socket.socket:
    try:
        sock = socket.create_server((host, port), backlog=2048, reuse_port=False)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    # Accepted connections inherit TCP_NODELAY: without it, a keep-alive client waits ~40 ms
    # per answer (Nagle against delayed ACK; measured with uvicorn's h11 protocol here).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.set_inheritable(True)
    return sock


def serve(
    settings: TqSettings,
    port_file: str | None = None,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM (uvicorn handles both)."""
    if not settings.operator_token or not settings.pilot_token:
        raise ConfigError(
            "the Task Queue needs operator_token and pilot_token "
            "(GLIDEIN_EXT_TQ_OPERATOR_TOKEN, GLIDEIN_EXT_TQ_PILOT_TOKEN or the config file)"
        )
    store = open_store(settings)
    sock = bind(settings.host, settings.port)
    host, port = sock.getsockname()[:2]
    if port_file:
        tmp = Path(f"{port_file}.tmp{os.getpid()}")
        tmp.write_text(f"{port}\n")
        tmp.replace(port_file)
    if announce is not None:
        announce(f"Task Queue listening on http://{host}:{port} (database {settings.database})")
    config = uvicorn.Config(
        build_app(store, settings),
        log_level="warning",
        access_log=False,
        timeout_keep_alive=30,
        backlog=2048,
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        store.engine.dispose()
