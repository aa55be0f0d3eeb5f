"""`glidein-ext init`: set a glidein up when something else starts its HTCondor (glideinWMS)."""

from __future__ import annotations

import os
import time

import click


@click.command()
@click.option("--start-dir", required=True, help="The glidein's start-up directory.")
@click.option("--cpus", type=click.IntRange(min=1), required=True, help="CPUs the glidein owns.")
@click.option("--start-time", type=int, default=None, help="Glidein start (unix time; now).")
@click.option("--todie", type=int, default=None, help="GLIDEIN_ToDie, if known (unix time).")
@click.option("--retire-time", type=int, default=None, help="GLIDEIN_ToRetire (unix time).")
@click.option("--name", default="", help="The glidein's name.")
@click.option("--config", "config_file", default=None, help="glidein-ext settings file (TOML).")
@click.option("--priority-factor", type=int, default=None, help="PRIORITY_FACTOR to publish.")
def init(
    start_dir: str,
    cpus: int,
    start_time: int | None,
    todie: int | None,
    retire_time: int | None,
    name: str,
    config_file: str | None,
    priority_factor: int | None,
) -> None:
    """Write glidein.json and the first .pilot.ad (USED_FRACTION1k = 0)."""
    from glidein_ext.errors import UsageError
    from glidein_ext.glidein.info import GlideinInfo
    from glidein_ext.glidein.settings import Settings
    from glidein_ext.glidein.startup import init_glidein

    if not os.path.isdir(start_dir):
        raise UsageError(f"start dir {start_dir} is not a directory")
    settings = Settings.load(config_file, overrides={"priority_factor": priority_factor})
    now = int(time.time())
    info = GlideinInfo(
        cpus=cpus,
        start_time=start_time or now,
        todie=todie if todie and todie > 0 else None,
        retire_time=retire_time if retire_time and retire_time > 0 else None,
        priority_factor=settings.priority_factor,
        expected_end_sources=settings.expected_end_sources,
        max_end_sources=settings.max_end_sources,
        name=name,
    )
    result = init_glidein(os.path.abspath(start_dir), info, now, os.environ)
    for problem in result.errors:
        click.echo(f"glidein-ext init: warning: {problem}", err=True)
    click.echo(f"glidein-ext: initialised {os.path.abspath(start_dir)} ({cpus} CPUs)")
