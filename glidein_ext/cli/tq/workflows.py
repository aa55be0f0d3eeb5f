"""`tq submit` (a workflow file, all of it or nothing) and `tq generate` (Hasham 2011's W1, W2
and W3 workflows)."""

from __future__ import annotations

import click
import yaml

from glidein_ext.cli.tq.options import ca_option, operator_client, token_option, url_option
from glidein_ext.errors import UsageError

MAX_SCALE = 1000  # `tq generate --scale`: W1 at 1000 is 160 000 tasks


@click.command()
@click.argument("path", type=click.Path(dir_okay=False))
@url_option
@token_option
@ca_option
def submit(path: str, url: str | None, token: str | None, ca_file: str | None) -> None:
    """Submit a workflow file (YAML or JSON); all of it, or nothing."""
    from glidein_ext.tq.workflow import parse_workflow, read_workflow_data

    data = read_workflow_data(path)  # read once, bounded (no YAML aliases, size, depth)
    workflow = parse_workflow(data)  # checked here first: one clear line, nothing sent
    answer = operator_client(url, token, ca_file).submit(data)
    click.echo(f"workflow {answer.workflow_id} ({workflow.name}): {answer.tasks} tasks")


@click.command()
@click.argument("kind", type=click.Choice(["w1", "w2", "w3"]))
@click.option("--scale", type=float, default=1.0, show_default=True, help="Task-count factor.")
@click.option("--size", type=int, default=0, show_default=True, help="Bytes added to each output.")
@click.option("--sleep", type=float, default=0.0, show_default=True, help="Seconds each task runs.")
@click.option("-o", "--output", default="-", show_default=True, help="File to write ('-': stdout).")
def generate(kind: str, scale: float, size: int, sleep: float, output: str) -> None:
    """Write Hasham 2011's W1 (chain), W2 (splitting) or W3 (merging) workflow as YAML."""
    from glidein_ext.tq.workflow import generate as make

    if not 0 < scale <= MAX_SCALE or not 0 <= size <= 2**40 or not 0 <= sleep <= 10**6:
        raise UsageError(
            f"--scale must be in (0, {MAX_SCALE}], --size in 0..2^40, --sleep in 0..10^6"
        )
    text = yaml.safe_dump(make(kind, scale, size, sleep), sort_keys=False, width=1000)
    if output == "-":
        click.echo(text, nl=False)
        return
    try:
        with open(output, "w") as handle:
            handle.write(text)
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror}") from None
