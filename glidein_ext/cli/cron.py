"""`glidein-ext cron`: the glidein's startd cron job (STARTD_CRON_GLIDEINEXT)."""

from __future__ import annotations

import os
import sys
import time

import click


@click.command()
@click.option("--start-dir", default=None, help="The glidein's start-up directory.")
def cron(start_dir: str | None) -> None:
    """Publish the drain order as slot attributes and refresh .pilot.ad (always exits 0)."""
    from glidein_ext.pilot.hooks import run_cron

    report = run_cron(start_dir, int(time.time()), os.environ)
    sys.stdout.write(report.render())
    sys.stdout.flush()
