"""`glidein-ext demo`: the narrated handshake in the real HTCondor pool."""

from __future__ import annotations

import os

import click


@click.command()
@click.option("--keep-pool", is_flag=True, help="Leave the chroot pool running afterwards.")
def demo(keep_pool: bool) -> None:
    """Run the graceful-draining handshake in a real HTCondor pool (needs root)."""
    from glidein_ext.demo import run_handshake_demo
    from glidein_ext.errors import UsageError

    if os.geteuid() != 0:
        raise UsageError("the demo builds and runs an HTCondor chroot: run it as root")
    run_handshake_demo(click.echo, keep_pool=keep_pool)
