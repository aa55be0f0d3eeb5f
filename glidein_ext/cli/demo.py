"""`glidein-ext demo`: the whole system (default), or one of its scenes, narrated."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import click

SCENES = ("system", "workflow", "handshake", "site")


class _Progress:
    """The live progress line: redrawn in place on a terminal; elsewhere (a log) every 10th
    state.  An empty line ends a run: its last state stays on a line of its own."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self.count = 0
        self.last = ""

    def __call__(self, line: str) -> None:
        if not line:
            if self.tty:
                click.echo("")
            elif self.last and (self.count - 1) % 10:
                click.echo(self.last)
            self.count, self.last = 0, ""
            return
        if self.tty:
            click.echo("\r\033[K" + line, nl=False)
        elif self.count % 10 == 0:
            click.echo(line)
        self.count += 1
        self.last = line


@click.command()
@click.option(
    "--scene",
    type=click.Choice(SCENES),
    default="system",
    show_default=True,
    help="system: a Task Queue, a site of pilots with the DHT and caches running W1, then the "
    "drain scene; workflow: the first part only (no HTCondor, no root); handshake: the drain "
    "scene only; site: glideins as site jobs joining a VO pool, vacated by the site, then "
    "pulling Task Queue work.",
)
@click.option("--site", "site_scene", is_flag=True, help="Same as --scene site.")
@click.option("--keep-pool", is_flag=True, help="Leave the chroot pools running afterwards.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the run's files and logs here (default: a temporary directory, removed).",
)
def demo(scene: str, site_scene: bool, keep_pool: bool, workdir: Path | None) -> None:
    """Show glidein-ext at work on the embedded default (HTCondor scenes need root)."""
    from glidein_ext.errors import UsageError

    if site_scene:
        scene = "site"
    if scene != "workflow" and os.geteuid() != 0:
        raise UsageError(
            f"the {scene} scene runs an HTCondor chroot: run it as root "
            "(or `glidein-ext demo --scene workflow`)"
        )
    if scene == "site":
        from glidein_ext.demos.site import run_site_demo

        run_site_demo(click.echo, keep_pool=keep_pool)
    elif scene == "handshake":
        from glidein_ext.demos.handshake import run_handshake_demo

        run_handshake_demo(click.echo, keep_pool=keep_pool)
    else:
        from glidein_ext.demos.system import run_system_demo

        if workdir is not None:
            workdir.mkdir(parents=True, exist_ok=True)
            run_system_demo(workdir, click.echo, _Progress(), keep_pool, scene == "system")
            return
        with tempfile.TemporaryDirectory(prefix="glidein-ext-demo-") as tmp:
            run_system_demo(Path(tmp), click.echo, _Progress(), keep_pool, scene == "system")
