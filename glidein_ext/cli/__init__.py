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

from glidein_ext import __version__
from glidein_ext.errors import GlideinExtError, MissingDependencyError

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
    "experiment": "glidein_ext.cli.experiment:experiment",
}

# What to install when a command's module needs a package the base install lacks (`pip install
# glidein-ext` is the glidein side only: click and watchdog; docs/deploy.md, Python requirements).
_EXTRAS: dict[str, str] = {
    "tq": (
        "pip install '.[tq]' in a glidein-ext checkout (the Task Queue service needs Python 3.11+)"
    ),
    "site": "pip install '.[site]' in a glidein-ext checkout",
    "demo": "pip install '.[site]' in a glidein-ext checkout",
    "experiment": "pip install '.[experiments]' in a glidein-ext checkout",
}

# Commands whose modules the glidein bundle leaves out (scripts/build-glidein-bundle).
_NOT_IN_BUNDLE = frozenset({"tq", "demo", "experiment"})


def _unavailable(name: str, missing: str, absent: bool = False) -> click.Command:
    """A stand-in for a command whose module needs ``missing`` (``absent``: whose own module is
    not installed, as in the glidein bundle): listed, and one error when run."""
    hint = _EXTRAS.get(name, "pip install '.[tq,site]' in a glidein-ext checkout")
    said = f"needs the Python package {missing!r}, not installed here: {hint}"
    if absent:
        said = f"is not in this install (the glidein bundle has the glidein side only): {hint}"

    def refuse(args: tuple[str, ...]) -> None:
        del args
        raise MissingDependencyError(f"glidein-ext {name} {said}")

    return click.Command(
        name,
        callback=refuse,
        params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
        help=f"(unavailable: {said})" if absent else f"(unavailable: needs {missing!r}; {hint})",
        context_settings={"ignore_unknown_options": True},
        add_help_option=False,
    )


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
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            missing = exc.name or ""
            if missing == module_name and cmd_name in _NOT_IN_BUNDLE:  # its module is left out
                return _unavailable(cmd_name, missing, absent=True)
            if not missing or missing.split(".")[0] == "glidein_ext":
                raise  # our own module is broken: a bug, not a missing extra
            return _unavailable(cmd_name, missing.split(".")[0])
        command = getattr(module, attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command


@click.group(cls=LazyGroup, lazy=_COMMANDS)
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(__version__, prog_name="glidein-ext", message="%(prog)s %(version)s")
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
