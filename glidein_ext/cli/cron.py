"""`glidein-ext cron`: the glidein's startd cron job (STARTD_CRON_GLIDEINEXT).

HTCondor's own invocation takes the fast path in :mod:`glidein_ext.entry`; this click command is
the same code for humans (and --help).
"""

from __future__ import annotations

import click


@click.command()
@click.option("--start-dir", default=None, help="The glidein's start-up directory.")
@click.option(
    "--todie",
    default=None,
    help="The glidein's end (GLIDEIN_ToDie, unix time) if the config knows it.",
)
def cron(start_dir: str | None, todie: str | None) -> None:
    """Publish the drain order as slot attributes and refresh .pilot.ad (always exits 0)."""
    import os
    import time

    from glidein_ext.glidein.hooks import run_cron

    report = run_cron(start_dir, int(time.time()), os.environ, config_todie=todie)
    click.echo(report.render(), nl=False)
