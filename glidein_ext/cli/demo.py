"""`glidein-ext demo`: the narrated handshake (or, with --site, a site and a VO) in real pools."""

from __future__ import annotations

import os

import click


@click.command()
@click.option("--keep-pool", is_flag=True, help="Leave the chroot pools running afterwards.")
@click.option(
    "--site",
    "site_scene",
    is_flag=True,
    help="The site scene: glideins as site jobs joining a VO pool, vacated by the site.",
)
def demo(keep_pool: bool, site_scene: bool) -> None:
    """Run the graceful-draining handshake in a real HTCondor pool (needs root)."""
    from glidein_ext.errors import UsageError

    if os.geteuid() != 0:
        raise UsageError("the demo builds and runs an HTCondor chroot: run it as root")
    if site_scene:
        from glidein_ext.demo_site import run_site_demo

        run_site_demo(click.echo, keep_pool=keep_pool)
        return
    from glidein_ext.demo import run_handshake_demo

    run_handshake_demo(click.echo, keep_pool=keep_pool)
