"""`glidein-ext pilot-ad show DIR`: a pilot's .pilot.ad, decoded for humans."""

from __future__ import annotations

import json
import os
import time

import click


@click.group("pilot-ad")
def pilot_ad() -> None:
    """Inspect a pilot's .pilot.ad."""


@pilot_ad.command("show")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show(directory: str, as_json: bool) -> None:
    """Show DIR/.pilot.ad: values, human times, heartbeat age."""
    from glidein_ext.adfile import read_ad_with_stat
    from glidein_ext.glidein.pilotad import PILOT_AD_FILE, PILOT_AD_SCHEMA
    from glidein_ext.glidein.render import describe_pilot_ad

    path = os.path.join(directory, PILOT_AD_FILE)
    values, st = read_ad_with_stat(path, PILOT_AD_SCHEMA)
    now = int(time.time())
    heartbeat = int(st.st_mtime)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "path": path,
                    "heartbeat": heartbeat,
                    "heartbeat_age": now - heartbeat,
                    "values": values,
                },
                indent=1,
            )
        )
        return
    click.echo(describe_pilot_ad(path, values, heartbeat, now))
