"""`glidein-ext wrapper`: start a glidein (condor_master) and keep the handshake."""

from __future__ import annotations

import os
import re
from importlib import resources

import click

GLIDEIN_SNIPPET = "50-glidein-ext-glidein.config"


def default_snippet() -> str:
    return str(resources.files("glidein_ext").joinpath("condor_config.d", GLIDEIN_SNIPPET))


@click.command()
@click.option("--start-dir", default=".", show_default=True, help="The glidein's start-up dir.")
@click.option("--cpus", type=click.IntRange(min=1), default=None, help="CPUs (default: all).")
@click.option(
    "--memory",
    "memory_mb",
    type=click.IntRange(min=64),
    default=None,
    help="Memory in MB (default: 2048 per CPU).",
)
@click.option("--name", default=None, help="Glidein name (MASTER_NAME/STARTD_NAME).")
@click.option(
    "--base-config",
    default=None,
    help="HTCondor config to include first (the factory's or site's base).",
)
@click.option(
    "--collector",
    default=None,
    help="The pool to join, host[:port] (COLLECTOR_HOST over the base config's): the VO's pool.",
)
@click.option("--site", default=None, help="The site's name, published as GLIDEIN_Site.")
@click.option("--snippet", default=None, help="Glidein snippet (default: the packaged one).")
@click.option(
    "--launcher",
    default=None,
    help="Command HTCondor runs for the cron and hooks (default: this glidein-ext).",
)
@click.option("--lifetime", default=None, help="Glidein lifetime, e.g. 48h (sets GLIDEIN_ToDie).")
@click.option(
    "--retire-after", default=None, help="Stop taking jobs after this (GLIDEIN_ToRetire)."
)
@click.option("--cron-period", type=int, default=None, help="Startd cron period in seconds.")
@click.option("--priority-factor", type=int, default=None, help="PRIORITY_FACTOR to publish.")
@click.option(
    "--deadline-margin",
    type=int,
    default=None,
    help="Seconds before the deadline by which jobs must be gone.",
)
@click.option("--max-vacate-time", type=int, default=None, help="MachineMaxVacateTime (seconds).")
@click.option("--config", "config_file", default=None, help="glidein-ext settings file (TOML).")
@click.option(
    "--condor-config-line",
    "extra",
    multiple=True,
    help="Extra HTCondor config line (repeatable), after the snippet.",
)
@click.option("--condor-master", default="condor_master", show_default=True)
@click.option(
    "--static-slots",
    is_flag=True,
    help="One static slot per CPU instead of one partitionable slot.",
)
def wrapper(
    start_dir: str,
    cpus: int | None,
    memory_mb: int | None,
    name: str | None,
    base_config: str | None,
    collector: str | None,
    site: str | None,
    snippet: str | None,
    launcher: str | None,
    lifetime: str | None,
    retire_after: str | None,
    cron_period: int | None,
    priority_factor: int | None,
    deadline_margin: int | None,
    max_vacate_time: int | None,
    config_file: str | None,
    extra: tuple[str, ...],
    condor_master: str,
    static_slots: bool,
) -> None:
    """Write .pilot.ad, start condor_master with the glidein config, obey .site.ad."""
    from glidein_ext.errors import UsageError
    from glidein_ext.glidein.settings import load_settings
    from glidein_ext.glidein.wrapper import GlideinWrapper, WrapperConfig
    from glidein_ext.timefmt import parse_duration

    for option, value in (("--name", name), ("--site", site), ("--collector", collector)):
        if value is not None and not re.fullmatch(r"[A-Za-z0-9_.@:+-]{1,200}", value):
            raise UsageError(f"{option} {value!r}: use letters, digits and _ . @ : + - only")

    settings = load_settings(
        config_file,
        overrides={
            "cron_period": cron_period,
            "priority_factor": priority_factor,
            "deadline_margin": deadline_margin,
            "max_vacate_time": max_vacate_time,
        },
    )
    ncpus = cpus or os.cpu_count() or 1
    cfg = WrapperConfig(
        start_dir=os.path.abspath(start_dir),
        cpus=ncpus,
        memory_mb=memory_mb or 2048 * ncpus,
        name=name or f"glidein_{os.getpid()}",
        snippet=os.path.abspath(snippet) if snippet else default_snippet(),
        base_config=os.path.abspath(base_config) if base_config else None,
        launcher=launcher,
        lifetime=parse_duration(lifetime) if lifetime else None,
        retire_after=parse_duration(retire_after) if retire_after else None,
        settings=settings,
        extra_config=extra,
        condor_master=condor_master,
        static_slots=static_slots,
        collector=collector,
        site=site,
    )

    def log(message: str) -> None:
        click.echo(f"glidein-ext wrapper: {message}", err=True)

    status = GlideinWrapper(cfg, log=log).run()
    raise SystemExit(status)
