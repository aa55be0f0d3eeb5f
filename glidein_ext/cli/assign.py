"""`glidein-ext tq assign`: the master's assignment (Delgado Peris 2014 §III.C) on a rank matrix
from a CSV."""

from __future__ import annotations

import json

import click

from glidein_ext.errors import UsageError
from glidein_ext.sched.assign import DEFAULT_METHOD, METHODS, methods_help


@click.command()
@click.option(
    "--ranks",
    "path",
    required=True,
    help="CSV: row i = task i, column j = pilot j (0-based); an empty cell is not allowed.",
)
@click.option(
    "--method",
    type=click.Choice(list(METHODS)),
    default=DEFAULT_METHOD,
    show_default=True,
    help=methods_help(),
)
@click.option("--json", "as_json", is_flag=True, help="Print {method, pairs, served, sum}.")
def assign(path: str, method: str, as_json: bool) -> None:
    """Assign at most one task per pilot from a rank matrix; print the pairs and their sum."""
    from glidein_ext.sched.assign import assign as run
    from glidein_ext.sched.matrix import RankMatrix

    try:
        with open(path, encoding="utf-8", newline="") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    result = run(RankMatrix.from_csv(text), method)
    if as_json:
        click.echo(json.dumps(result.as_json()))
        return
    click.echo(f"{'task':>6} {'pilot':>6} {'rank':>12}")
    for index, (row, col) in enumerate(result.pairs):
        click.echo(f"{row:>6} {col:>6} {result.ranks[index]:>12g}")
    click.echo(f"{result.method}: {result.served} pilots served, rank sum {result.total:g}")
