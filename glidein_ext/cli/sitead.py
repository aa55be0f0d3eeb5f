"""`glidein-ext site-ad show|write DIR`: read or write a pilot's .site.ad."""

from __future__ import annotations

import os
import time

import click


@click.group("site-ad")
def site_ad() -> None:
    """Inspect or write a pilot's .site.ad (the site's request)."""


@site_ad.command("show")
@click.argument("directory", type=click.Path(file_okay=False))
def show(directory: str) -> None:
    """Show DIR/.site.ad and the drain order it gives (with $MACHINEFEATURES/$JOBFEATURES)."""
    from glidein_ext.glidein.mjf import read_features
    from glidein_ext.glidein.refresh import read_site_ad
    from glidein_ext.glidein.render import describe_site_ad
    from glidein_ext.glidein.sitead import SITE_AD_FILE, drain_order

    now = int(time.time())
    values = read_site_ad(directory)  # a bad file raises: one line, non-zero exit
    features = read_features(os.environ)
    order = drain_order(
        values, now, machine_shutdown=features.machine_shutdown, job_shutdown=features.job_shutdown
    )
    path = os.path.join(directory, SITE_AD_FILE)
    click.echo(describe_site_ad(path, values, order, now, features.errors))


@site_ad.command("write")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option(
    "--vacate/--no-vacate",
    default=None,
    help="Ask the pilot to drain (VACATE_DESIRED = true), or cancel that.",
)
@click.option(
    "--deadline", default=None, help="Hard deadline: a duration from now (2h, 90m) or a unix time."
)
def write(directory: str, vacate: bool | None, deadline: str | None) -> None:
    """Write DIR/.site.ad atomically."""
    from glidein_ext.errors import UsageError
    from glidein_ext.glidein.sitead import SITE_AD_FILE
    from glidein_ext.glidein.siteadwrite import write_site_ad
    from glidein_ext.timefmt import format_time, parse_deadline

    if vacate is None:
        raise UsageError("say --vacate or --no-vacate")
    if not os.path.isdir(directory):
        raise UsageError(f"{directory} is not a directory")
    now = int(time.time())
    when = None
    if deadline is not None:
        if not vacate:
            raise UsageError("--deadline only goes with --vacate")
        when = parse_deadline(deadline, now)
    write_site_ad(directory, vacate=vacate, deadline=when)
    path = os.path.join(directory, SITE_AD_FILE)
    if vacate:
        extra = f", deadline {format_time(when, now)}" if when is not None else ""
        click.echo(f"wrote {path}: VACATE_DESIRED = true{extra}")
    else:
        click.echo(f"wrote {path}: VACATE_DESIRED = false (drain cancelled)")
