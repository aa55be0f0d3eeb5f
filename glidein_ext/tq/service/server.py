"""Run the Task Queue: database, migrations, store, API, the reaper and the PilotMonitor.

The server binds its own socket (so port 0 works and the bound port is known before serving),
writes it to ``port_file`` if asked, and stops on SIGINT/SIGTERM.  With ``tls_cert`` (and
``tls_key``) it speaks only TLS on that socket: a plain HTTP request gets no answer.  The reaper
and, with a sites file, the PilotMonitor (Hasham 2011 §IV-A) are watched loops
(``tq.service.loops``) whose asyncio tasks the application's lifespan owns: a failing pass (schedd
down, database error) is
logged and retried at the next interval, and ``/healthz`` reports each loop.  Each PilotMonitor
pass logs one line per site on the ``glidein_ext.tq.manager.monitor`` logger.

On PostgreSQL the service is one instance of a pool (Lee 2003): its database sessions carry the
instance's name, a listener loop absorbs the other instances' changes (``tq.service.pool.notify``),
a resync loop is its safety net, and the PilotMonitor passes only while this instance holds the
pool's advisory lock (``tq.service.pool.leader``).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING, Any

import uvicorn
from fastapi import Depends, FastAPI

from glidein_ext.errors import ConfigError
from glidein_ext.tq.client.protocol import API
from glidein_ext.tq.manager.monitor import (
    Decision,
    MonitorStore,
    PilotSubmitter,
    SitePolicy,
    run_cycle,
)
from glidein_ext.tq.manager.pilot_submit import CredentialIssuer, PilotManager
from glidein_ext.tq.manager.sites import SiteConfig, load_sites
from glidein_ext.tq.models import Architecture
from glidein_ext.tq.service import httpguard
from glidein_ext.tq.service.api.access import operator_access
from glidein_ext.tq.service.api.app import create_app
from glidein_ext.tq.service.api.fastpath import TaskQueueApp
from glidein_ext.tq.service.api.wlcg_tokens import load_verifier
from glidein_ext.tq.service.db import (
    instance_name,
    is_pool_url,
    libpq_url,
    make_engine,
    migrate,
    named_url,
    url_for,
)
from glidein_ext.tq.service.loops import WatchedLoop
from glidein_ext.tq.service.pool.courier import OfferBoard
from glidein_ext.tq.service.pool.leader import Leadership, SoleLeader
from glidein_ext.tq.service.settings import TqSettings
from glidein_ext.tq.service.store import Store
from glidein_ext.tq.service.watch.ops import StuckWatch
from glidein_ext.tq.service.watch.ops import install as install_ops

if TYPE_CHECKING:
    from glidein_ext.tq.service.pool.notify import PoolListener

log = logging.getLogger("glidein_ext.tq.manager.monitor")


def open_store(
    settings: TqSettings, sites: Sequence[SiteConfig] = (), name: str | None = None
) -> Store:
    """Engine, migrations, and the store rebuilt from the database; ``name``: this instance's
    name in a pool (its PostgreSQL sessions carry it, ``tq.service.pool.notify``)."""
    database = url_for(settings.database)
    check_sqlite_file(database)
    engine = make_engine(named_url(database, name) if name else database)
    migrate(engine)
    store = Store(
        engine,
        wait_for_data=settings.wait_for_data,
        heartbeat_timeout=settings.heartbeat_timeout,
        heartbeat_interval=settings.heartbeat_interval,
        default_architecture=settings.default_architecture,
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
        issuer: CredentialIssuer | None = None,
        leader: Leadership | None = None,
    ) -> None:
        """``issuer``: where the PilotManagers mint each pilot job's credential (the store);
        None: the jobs carry none (the shared pilot token in their environment).  ``leader``:
        whether this instance of a pool runs the passes now (None: always,
        ``tq.service.pool.leader``)."""
        self.store = store
        self.leader: Leadership = leader or SoleLeader()
        self.leading = False
        self.sites = list(sites)
        self.tq_url = tq_url
        self.interval = interval
        self.clock = clock
        managers: dict[tuple[str | None, str | None], PilotManager] = {}
        self.policies: list[tuple[SitePolicy, PilotSubmitter]] = [
            (
                site.policy(tq_url),
                site.submitter(issuer, managers),  # one schedd, or several (tq.manager.schedds)
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
        """One pass over every site, each decision logged; none while another instance of the
        pool holds the PilotMonitor's role."""
        self.leading = self.leader.held()
        if not self.leading:
            return []
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
            "leader": self.leading,
            "passes": self.passes,
            "last_pass_at": self.last_at,
            "sites": sites,
        }


def build_app(
    store: Store,
    settings: TqSettings,
    monitor: PilotMonitorService | None = None,
    pool: PoolListener | None = None,  # tq.service.pool.notify, imported only for a pool
    courier: OfferBoard | None = None,
) -> TaskQueueApp:
    """The API plus a lifespan that owns the reaper's, the PilotMonitor's and (in a pool) the
    listener's and the resync's tasks."""
    reaper = WatchedLoop(
        "reaper",
        store.reap,
        settings.reap_interval,
        stuck_after=settings.loop_stuck_after,
        log=logging.getLogger("glidein_ext.tq.reaper"),
    )
    loops = [reaper] if monitor is None else [reaper, monitor.loop]
    if pool is not None:
        pool_log = logging.getLogger("glidein_ext.tq.pool")
        stuck = settings.loop_stuck_after
        loops.append(WatchedLoop("pool-listen", pool.listen, 0, stuck_after=stuck, log=pool_log))
        loops.append(
            WatchedLoop(
                "pool-resync", pool.resync, settings.pool_resync, stuck_after=stuck, log=pool_log
            )
        )
    watch = StuckWatch(store, settings)  # tq.service.watch.stuck: queued-idle, silent, no progress
    loops.append(watch.loop)
    app = create_app(
        store, settings, loops, courier
    )  # courier: tq.service.pool.courier, tq.service.pool.courier_pool
    install_ops(app, store, settings, loops, watch)  # tasks, warnings, masters, /metrics

    @app.get(f"{API}/sites", dependencies=[Depends(operator_access)])
    def sites() -> dict[str, Any]:
        """The PilotMonitor's sites (Hasham 2011 §IV-A): thresholds, pilots by state, vanished
        pilots."""
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
            if pool is not None:
                pool.close()
            if monitor is not None:
                monitor.leader.close()
            app.state.costly.close()  # tq.service.matching.costly's worker process
            app.state.submission_parser.close()  # tq.service.api.large_submit's

    app.router.lifespan_context = lifespan
    return app


class _Server(uvicorn.Server):
    """uvicorn's server that, told to stop, first ends the calls that wait (the masters' long
    polls, the pilots' standing offers): a clean stop does not wait out their waits (up to a
    minute), only the calls being served."""

    def __init__(self, config: uvicorn.Config, on_exit: Sequence[Callable[[], None]]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        for end in self._on_exit:
            end()


def check_sqlite_file(url: str) -> None:
    """A SQLite database the service can use, checked before SQLAlchemy opens it: ConfigError, one
    line naming the path and the cause (its directory is missing, it is a directory, it cannot be
    read or written); a new file is created by SQLite, next to its lock."""
    if not url.startswith("sqlite:///") or url == "sqlite:///:memory:":
        return
    path = Path(url[len("sqlite:///") :])
    if not path.parent.is_dir():
        raise ConfigError(f"the database {path}: its directory {path.parent} does not exist")
    if path.is_dir():
        raise ConfigError(f"the database {path} is a directory, not a SQLite file")
    if not path.exists():
        return
    for mode, verb in ((os.O_RDONLY, "read"), (os.O_RDWR, "write")):
        try:
            os.close(os.open(path, mode))
        except OSError as exc:
            raise ConfigError(f"the database {path}: cannot {verb} it: {exc.strerror}") from None


def hold_sqlite(url: str) -> IO[str] | None:
    """One ``tq serve`` per SQLite file: an exclusive lock on ``<database>.lock`` (with the
    holder's pid in it), held while this process runs; ConfigError, one line, if another process
    holds it.  Two services on one SQLite file would each keep their own queue in memory and
    hand out each other's tasks blindly (a pool of instances needs PostgreSQL, Lee 2003)."""
    if not url.startswith("sqlite:///") or url == "sqlite:///:memory:":
        return None
    path = Path(url[len("sqlite:///") :] + ".lock")
    try:
        handle = open(path, "a+")  # noqa: SIM115 -- held open: the lock lives as long as it
    except OSError as exc:
        raise ConfigError(
            f"the database {url[len('sqlite:///') :]}: cannot create its lock file {path}: "
            f"{exc.strerror}"
        ) from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        raise ConfigError(
            f"another tq serve (pid {holder}) already serves the database {url[10:]}: stop it "
            "first (several instances need one PostgreSQL database: docs/tq.md, Pool)"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


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


def check_tls(settings: TqSettings) -> ssl.SSLContext | None:
    """The server's TLS context from ``tls_cert``/``tls_key`` (None: plain HTTP); ConfigError,
    one line, if they cannot be used.  Client certificates are not asked for."""
    if not settings.tls_cert:
        return None
    if not settings.tls_key and not _holds_key(settings.tls_cert):
        raise ConfigError(
            f"the TLS certificate {settings.tls_cert} holds no private key: give its key with "
            "--tls-key (or put the key in the certificate's file)"
        )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(settings.tls_cert, settings.tls_key or None)
    except (OSError, ssl.SSLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        files = settings.tls_cert + (f" and {settings.tls_key}" if settings.tls_key else "")
        raise ConfigError(f"cannot use the TLS certificate and key {files}: {reason}") from None
    names = _names(settings.tls_cert)
    if names is not None and not names:
        log.warning(
            "the TLS certificate %s has no subjectAltName: clients refuse it (a Common Name "
            "alone is not checked); make it with the service's host names and addresses as "
            "subjectAltName (docs/tq.md, TLS)",
            settings.tls_cert,
        )
    return context


def _holds_key(path: str) -> bool:
    """Whether a PEM file holds a private key (a certificate's file may hold its key too)."""
    try:
        with open(path, "rb") as handle:
            return b"PRIVATE KEY-----" in handle.read(1 << 20)
    except OSError:
        return True  # let the TLS library say why it cannot read it


def _names(path: str) -> tuple[Any, ...] | None:
    """The subjectAltName entries of the first certificate in ``path``; None when it cannot be
    decoded here (then nothing is said)."""
    decode = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)
    if decode is None:
        return None
    try:
        decoded = decode(path)
    except (OSError, ssl.SSLError, ValueError):
        return None
    return tuple(decoded.get("subjectAltName", ()))


# uvicorn's own context is used (it loads the same files): only AEAD suites with forward secrecy,
# which also rules out TLS before 1.2 (TLS 1.3 chooses its own suites).
TLS_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


def _public(host: str) -> str:
    """The host name pilots call: the machine's when the socket listens on every address."""
    public = socket.getfqdn() if host in ("0.0.0.0", "::", "") else host  # noqa: S104
    return f"[{public}]" if ":" in public else public


def _monitor(
    settings: TqSettings,
    store: Store,
    sites: list[SiteConfig],
    leader: Leadership | None,
    tq_url: str,
) -> PilotMonitorService:
    """The PilotMonitor over the sites file (Hasham 2011 §IV-A), its pilots calling ``tq_url``."""
    monitor = PilotMonitorService(
        store,
        sites,
        tq_url,
        settings.monitor_interval,
        stuck_after=settings.loop_stuck_after,
        issuer=store,
        leader=leader,
    )
    log.info(
        "PilotMonitor: %d site(s) from %s, a pass every %d s, pilots call %s",
        len(sites),
        settings.sites,
        settings.monitor_interval,
        tq_url,
    )
    return monitor


def serve(
    settings: TqSettings,
    port_file: str | None = None,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM (uvicorn handles both)."""
    if not settings.operator_token:
        raise ConfigError(
            "the Task Queue needs operator_token (GLIDEIN_EXT_TQ_OPERATOR_TOKEN or the config file)"
        )
    tls = check_tls(settings)
    if settings.token_issuers:  # its errors before the port is bound (the app loads it again)
        load_verifier(settings.token_issuers)
    scheme = "https" if tls is not None else "http"
    sites = load_sites(settings.sites) if settings.sites else None
    name = instance_name()
    check_sqlite_file(url_for(settings.database))
    sole = hold_sqlite(url_for(settings.database))  # held until this process exits
    store = open_store(settings, sites or (), name)
    pool = None
    leader: Leadership | None = None
    courier = OfferBoard(settings.courier_priority)  # Lee 2003 4.2.3: idle pilots' offers
    if is_pool_url(url_for(settings.database)):
        # psycopg only for a pool: ``tq serve`` on SQLite never imports it
        from glidein_ext.tq.service.pool.courier_pool import CourierFeed
        from glidein_ext.tq.service.pool.leader import AdvisoryLeader
        from glidein_ext.tq.service.pool.notify import PoolListener

        conninfo = libpq_url(store.engine.url)
        # urgent tasks another instance queued are pushed to offers here too
        pool = PoolListener(CourierFeed(store, courier), conninfo, name)
        leader = AdvisoryLeader(conninfo, name)
    sock = bind(settings.host, settings.port)
    host, port = sock.getsockname()[:2]
    monitor = None
    if sites is not None:
        monitor = _monitor(settings, store, sites, leader, f"{scheme}://{_public(host)}:{port}")
    if port_file:
        tmp = Path(f"{port_file}.tmp{os.getpid()}")
        tmp.write_text(f"{port}\n")
        tmp.replace(port_file)
    if announce is not None:
        pooled = f", pool instance {name}" if pool is not None else ""
        announce(
            f"Task Queue listening on {scheme}://{host}:{port} "
            f"(database {settings.database}{pooled})"
        )
    tls_options: dict[str, Any] = {}
    if tls is not None:
        tls_options = {
            "ssl_certfile": settings.tls_cert,
            "ssl_keyfile": settings.tls_key or None,
            "ssl_ciphers": TLS_CIPHERS,
        }
    app = build_app(store, settings, monitor, pool, courier)
    open_files = httpguard.raise_open_files()
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        http=httpguard.deadline_protocol(settings.http_header_timeout, settings.http_body_timeout),
        limit_concurrency=httpguard.max_connections(settings.http_max_connections, open_files),
        timeout_keep_alive=httpguard.KEEP_ALIVE,
        backlog=2048,
        # no "server: uvicorn" line: it names the software to a scanner, and each pilot's
        # http.client parses every header line of every answer (RFC 9110's Date stays)
        server_header=False,
        # clients are not behind a proxy whose X-Forwarded-* the service would trust (nothing
        # reads the client's address), so no middleware rewrites it on every request
        proxy_headers=False,
        **tls_options,
    )
    try:
        _Server(config, (app.state.site_waits.close, courier.close)).run(sockets=[sock])
    finally:
        sock.close()
        store.close()
        if sole is not None:
            sole.close()
