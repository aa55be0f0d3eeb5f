"""The `glidein-ext` command: click, with subcommands loaded lazily.

Subcommands are imported only when invoked, so that `glidein-ext cron` (run by the startd every
period) does not pay for modules it never uses.  This package is the only place that prints to the
user or exits.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from glidein_ext.errors import GlideinExtError

# name -> "module:attribute"; one module per noun.
_COMMANDS: dict[str, str] = {
    "cron": "glidein_ext.cli.cron:cron",
    "init": "glidein_ext.cli.init:init",
    "hook": "glidein_ext.cli.hook:hook",
    "wrapper": "glidein_ext.cli.wrapper:wrapper",
    "pilot-ad": "glidein_ext.cli.pilotad:pilot_ad",
    "site-ad": "glidein_ext.cli.sitead:site_ad",
    "demo": "glidein_ext.cli.demo:demo",
    "dht": "glidein_ext.cli.dht:dht",
    "tq": "glidein_ext.cli.tq:tq",
    "pilot": "glidein_ext.cli.pilot:pilot",
    "cache": "glidein_ext.cli.cache:cache",
    "tfc": "glidein_ext.cli.tfc:tfc",
    "site": "glidein_ext.cli.site:site",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self._lazy.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module_name, attr = target.split(":")
        command = getattr(importlib.import_module(module_name), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command


@click.group(cls=LazyGroup, lazy=_COMMANDS)
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(package_name="glidein-ext", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """glidein-ext: graceful draining, task queue, data caches and site DHT for glideins."""
    ctx.obj = {"debug": debug}


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and turn glidein-ext errors into one line and an exit code."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        rv = cli.main(args=argv, prog_name="glidein-ext", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except GlideinExtError as exc:
        if debug:
            raise
        click.echo(f"glidein-ext: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    if isinstance(rv, int) and rv != 0:
        sys.exit(rv)
