"""Run the Task Queue: database, migrations, store, API, the reaper and the PilotMonitor.

The server binds its own socket (so port 0 works and the bound port is known before serving),
writes it to ``port_file`` if asked, and stops on SIGINT/SIGTERM.  The reaper and, with a sites
file, the PilotMonitor (seed IV-A) are watched loops (``tq.loops``) whose asyncio tasks the
application's lifespan owns: a failing pass (schedd down, database error) is logged and retried
at the next interval, and ``/healthz`` reports each loop.  Each PilotMonitor pass logs one line per
site on the ``glidein_ext.tq.monitor`` logger.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import Depends, FastAPI

from glidein_ext.errors import ConfigError
from glidein_ext.tq.api import API, create_app, token_check
from glidein_ext.tq.db import make_engine, migrate
from glidein_ext.tq.loops import WatchedLoop
from glidein_ext.tq.models import Architecture
from glidein_ext.tq.monitor import Decision, MonitorStore, PilotSubmitter, SitePolicy, run_cycle
from glidein_ext.tq.settings import TqSettings
from glidein_ext.tq.sites import SiteConfig, load_sites
from glidein_ext.tq.store import Store
from glidein_ext.tq.submit import PilotManager

log = logging.getLogger("glidein_ext.tq.monitor")


def open_store(settings: TqSettings, sites: Sequence[SiteConfig] = ()) -> Store:
    """Engine, migrations, and the store rebuilt from the database."""
    engine = make_engine(settings.database)
    migrate(engine)
    store = Store(
        engine,
        wait_for_data=settings.wait_for_data,
        heartbeat_timeout=settings.heartbeat_timeout,
        heartbeat_interval=settings.heartbeat_interval,
        cache_mode=settings.default_architecture,
        architectures={s.site: Architecture(s.architecture) for s in sites if s.architecture},
        master_timeout=settings.master_timeout,
    )
    store.load()
    return store


class PilotMonitorService:
    """The PilotMonitor as the service runs it: the sites, one PilotManager per schedd, the
    decisions of the last pass (for ``GET /api/v1/sites``)."""

    def __init__(
        self,
        store: MonitorStore,
        sites: Sequence[SiteConfig],
        tq_url: str,
        interval: float,
        clock: Callable[[], float] = time.time,
        stuck_after: float = TqSettings.loop_stuck_after,
    ) -> None:
        self.store = store
        self.sites = list(sites)
        self.tq_url = tq_url
        self.interval = interval
        self.clock = clock
        managers: dict[tuple[str | None, str | None], PilotManager] = {}
        self.policies: list[tuple[SitePolicy, PilotSubmitter]] = [
            (
                site.policy(tq_url),
                managers.setdefault((site.pool, site.schedd), PilotManager(site.pool, site.schedd)),
            )
            for site in self.sites
        ]
        self.last: dict[str, Decision] = {}
        self.last_at: float | None = None
        self.passes = 0
        self.loop = WatchedLoop(
            "PilotMonitor", self.cycle, interval, stuck_after=stuck_after, log=log, clock=clock
        )

    def cycle(self) -> list[Decision]:
        """One pass over every site, each decision logged."""
        decisions = run_cycle(self.store, self.policies, self.clock())
        for decision in decisions:
            if decision.error is not None:
                log.warning("PilotMonitor %s (retry in %g s)", decision.describe(), self.interval)
            else:
                log.info("PilotMonitor %s", decision.describe())
            self.last[decision.site] = decision
        self.last_at = self.clock()
        self.passes += 1
        return decisions

    async def run(self) -> None:
        """Pass, sleep, pass...: a failing pass is logged and retried, never raised."""
        await self.loop.run()

    def status(self) -> dict[str, Any]:
        """Per site: thresholds, pilots inactive/idle/busy, vanished, the last decision."""
        sites = []
        for site in self.sites:
            view = self.store.site_view(site.site)
            states = list(self.store.submissions(site.site).values())
            last = self.last.get(site.site)
            sites.append(
                {
                    "site": site.site,
                    "pool": site.pool,
                    "schedd": site.schedd,
                    "min_pilots": site.limits.min_pilots,
                    "max_pilots": site.limits.max_pilots,
                    "min_idle_pilots": site.limits.min_idle_pilots,
                    "inactive": view.inactive,
                    "idle": view.idle,
                    "busy": view.busy,
                    "submitted": len(states),
                    "vanished": states.count("vanished"),
                    "last": None
                    if last is None
                    else {
                        "count": last.count,
                        "reason": last.reason,
                        "error": last.error,
                        "vanished": list(last.vanished),
                    },
                }
            )
        return {
            "interval": self.interval,
            "passes": self.passes,
            "last_pass_at": self.last_at,
            "sites": sites,
        }


def build_app(
    store: Store, settings: TqSettings, monitor: PilotMonitorService | None = None
) -> FastAPI:
    """The API plus a lifespan that owns the reaper's and the PilotMonitor's tasks."""
    reaper = WatchedLoop(
        "reaper",
        store.reap,
        settings.reap_interval,
        stuck_after=settings.loop_stuck_after,
        log=logging.getLogger("glidein_ext.tq.reaper"),
    )
    loops = [reaper] if monitor is None else [reaper, monitor.loop]
    app = create_app(store, settings, loops)
    operator_auth = token_check(settings.operator_token, "operator")

    @app.get(f"{API}/sites", dependencies=[Depends(operator_auth)])
    def sites() -> dict[str, Any]:
        """The PilotMonitor's sites (seed IV-A): thresholds, pilots by state, vanished pilots."""
        if monitor is None:
            return {"interval": None, "passes": 0, "last_pass_at": None, "sites": []}
        return monitor.status()

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(loop.run(), name=f"tq-{loop.name}") for loop in loops]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
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
    sites = load_sites(settings.sites) if settings.sites else None
    store = open_store(settings, sites or ())
    sock = bind(settings.host, settings.port)
    host, port = sock.getsockname()[:2]
    monitor = None
    if sites is not None:
        public = socket.getfqdn() if host in ("0.0.0.0", "::", "") else host  # noqa: S104
        public = f"[{public}]" if ":" in public else public
        tq_url = f"http://{public}:{port}"
        monitor = PilotMonitorService(
            store, sites, tq_url, settings.monitor_interval, stuck_after=settings.loop_stuck_after
        )
        log.info(
            "PilotMonitor: %d site(s) from %s, a pass every %d s, pilots call %s",
            len(sites),
            settings.sites,
            settings.monitor_interval,
            tq_url,
        )
    if port_file:
        tmp = Path(f"{port_file}.tmp{os.getpid()}")
        tmp.write_text(f"{port}\n")
        tmp.replace(port_file)
    if announce is not None:
        announce(f"Task Queue listening on http://{host}:{port} (database {settings.database})")
    config = uvicorn.Config(
        build_app(store, settings, monitor),
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
