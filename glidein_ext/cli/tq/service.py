"""`tq serve` (the Task Queue service, with its PilotMonitor when given sites) and `tq monitor`
(one PilotMonitor pass, Hasham 2011 §IV-A): the commands that run the service's parts on its
database."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import click

from glidein_ext.errors import UsageError

# The Task Queue service (tq serve) needs this Python; its clients and the pilots run on 3.9.
SERVICE_PYTHON = (3, 11)


@click.command()
@click.option("--config", "config_file", default=None, help="TOML settings file.")
@click.option("--database", default=None, help="SQLite file path or SQLAlchemy URL.")
@click.option("--host", default=None, help="Address to listen on (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (0: any free port).")
@click.option("--port-file", default=None, help="Write the bound port to this file.")
@click.option("--wait-for-data", type=int, default=None, help="waitForData bound (seconds).")
@click.option("--heartbeat-timeout", type=int, default=None, help="Seconds before a pilot is lost.")
@click.option(
    "--architecture",
    type=click.Choice(["pre-dht", "centralized", "distributed"]),
    default=None,
    help="Sites' architecture unless the sites file says (Delgado Peris 2014; default pre-dht).",
)
@click.option("--master-timeout", type=int, default=None, help="Seconds a silent master keeps it.")
@click.option(
    "--cache-mode", type=click.Choice(["pre-dht", "centralized"]), default=None, hidden=True
)
@click.option("--sites", default=None, help="PilotMonitor sites file: submit pilots by itself.")
@click.option("--monitor-interval", default=None, help="Time between PilotMonitor passes (60s).")
@click.option("--tls-cert", default=None, help="Serve HTTPS only: the certificate chain (PEM).")
@click.option("--tls-key", default=None, help="The certificate's private key (PEM).")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="The service's log on stderr; debug adds one line per request (the request log).",
)
def serve(
    config_file: str | None,
    port_file: str | None,
    monitor_interval: str | None,
    log_level: str,
    **flags: Any,
) -> None:
    """Run the Task Queue service until SIGINT or SIGTERM."""
    if sys.version_info < SERVICE_PYTHON:  # the glidein side runs on 3.9; the service does not
        raise UsageError(f"tq serve needs Python 3.11 or newer (this is {sys.version.split()[0]})")
    from glidein_ext.timefmt import parse_duration
    from glidein_ext.tq.service.server import serve as run_server
    from glidein_ext.tq.service.settings import TqSettings

    if monitor_interval is not None:
        flags["monitor_interval"] = parse_duration(monitor_interval)
    settings = TqSettings.load(config_file, overrides=flags)
    _log_to_stderr(log_level)
    try:
        run_server(settings, port_file=port_file, announce=lambda line: click.echo(line, err=True))
    except KeyboardInterrupt:  # Ctrl-C: uvicorn has shut down and raises SIGINT again after
        click.echo("Task Queue stopped (interrupted)", err=True)
    else:  # uvicorn shut down and the interrupt was not raised again: as clean a stop
        click.echo("Task Queue stopped", err=True)


def _log_to_stderr(level: str = "info") -> None:
    """The Task Queue's own log lines on stderr: the PilotMonitor's decisions, the loops' errors,
    stuck-work warnings (``glidein_ext.tq.stuck``), and at ``debug`` one line per request
    (``glidein_ext.tq.requests``: method, path, status, milliseconds)."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("tq %(asctime)s %(levelname)s %(message)s"))
    logger = logging.getLogger("glidein_ext.tq")
    logger.addHandler(handler)
    logger.setLevel(level.upper())


@click.command()
@click.option("--sites", "sites_file", required=True, help="PilotMonitor sites file.")
@click.option("--once", is_flag=True, help="One pass, then exit (required: the service loops).")
@click.option("--dry-run", is_flag=True, help="Decide and print; submit nothing, mark nothing.")
@click.option("--config", "config_file", default=None, help="TOML settings file.")
@click.option("--database", default=None, help="SQLite file path or SQLAlchemy URL.")
@click.option("--tq", "url", default=None, help="TQ URL the pilots call (default: settings).")
def monitor(
    sites_file: str,
    once: bool,
    dry_run: bool,
    config_file: str | None,
    database: str | None,
    url: str | None,
) -> None:
    """Run one PilotMonitor pass (Hasham 2011 §IV-A) on the TQ database: what it submits per site,
    why.

    Without --dry-run it submits, like the service does every interval; do not run it next to a
    `tq serve --sites` on the same sites.
    """
    from glidein_ext.tq.manager.monitor import run_cycle
    from glidein_ext.tq.manager.sites import load_sites
    from glidein_ext.tq.service.server import PilotMonitorService, open_store
    from glidein_ext.tq.service.settings import TqSettings

    if not once:
        raise UsageError("give --once (the periodic PilotMonitor runs in `tq serve --sites`)")
    sites = load_sites(sites_file)
    settings = TqSettings.load(config_file, overrides={"database": database})
    tq_url = url or f"http://{settings.host}:{settings.port}"
    store = open_store(settings)
    try:
        service = PilotMonitorService(store, sites, tq_url, settings.monitor_interval, issuer=store)
        decisions = run_cycle(store, service.policies, time.time(), dry_run=dry_run)
    finally:
        store.close()
    failed = 0
    for decision in decisions:
        verb = "would submit" if dry_run else "submitted"
        state = (
            f"inactive={decision.inactive} idle={decision.idle} busy={decision.busy} "
            f"queued={sum(decision.queued_groups)}"
        )
        limits = decision.limits
        bounds = f"min={limits.min_pilots} max={limits.max_pilots} minIdle={limits.min_idle_pilots}"
        if decision.error is not None:
            failed += 1
            click.echo(f"{decision.site}: failed: {decision.error}")
            continue
        vanished = f" vanished={len(decision.vanished)}" if decision.vanished else ""
        click.echo(
            f"{decision.site}: {verb} {decision.count} ({bounds}; {state}{vanished}): "
            f"{decision.reason}"
        )
    if failed:
        sys.exit(1)
