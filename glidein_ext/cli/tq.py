"""`glidein-ext tq`: serve the Task Queue, submit workflows, watch them, generate W1/W2/W3."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import click
import yaml

from glidein_ext.errors import UsageError

URL_ENV = "GLIDEIN_EXT_TQ_URL"
TOKEN_ENV = "GLIDEIN_EXT_TQ_OPERATOR_TOKEN"  # noqa: S105 (a variable name)
_STATES = ("waiting", "queued", "running", "done", "failed")


@click.group()
def tq() -> None:
    """The Task Queue (seed 001 IV): serve it, submit workflows, watch them."""


@tq.command()
@click.option("--config", "config_file", default=None, help="TOML settings file.")
@click.option("--database", default=None, help="SQLite file path or SQLAlchemy URL.")
@click.option("--host", default=None, help="Address to listen on (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (0: any free port).")
@click.option("--port-file", default=None, help="Write the bound port to this file.")
@click.option("--wait-for-data", type=int, default=None, help="waitForData bound (seconds).")
@click.option("--heartbeat-timeout", type=int, default=None, help="Seconds before a pilot is lost.")
@click.option("--cache-mode", type=click.Choice(["pre-dht", "centralized"]), default=None)
def serve(config_file: str | None, port_file: str | None, **flags: Any) -> None:
    """Run the Task Queue service until SIGINT or SIGTERM."""
    from glidein_ext.tq.server import serve as run_server
    from glidein_ext.tq.settings import load_tq_settings

    settings = load_tq_settings(config_file, overrides=flags)
    run_server(settings, port_file=port_file, announce=lambda line: click.echo(line, err=True))


def _client(url: str | None, token: str | None) -> Any:
    from glidein_ext.tq.client import TqClient

    url = url or os.environ.get(URL_ENV)
    token = token or os.environ.get(TOKEN_ENV)
    if not url:
        raise UsageError(f"give --tq URL or set ${URL_ENV}")
    if not token:
        raise UsageError(f"give --token or set ${TOKEN_ENV}")
    return TqClient(url, token)


_url = click.option("--tq", "url", default=None, help=f"Task Queue URL (or ${URL_ENV}).")
_token = click.option("--token", default=None, help=f"Operator token (or ${TOKEN_ENV}).")


@tq.command()
@click.argument("path", type=click.Path(dir_okay=False))
@_url
@_token
def submit(path: str, url: str | None, token: str | None) -> None:
    """Submit a workflow file (YAML or JSON); all of it, or nothing."""
    from glidein_ext.tq.workflow import load_workflow_file

    workflow = load_workflow_file(path)  # checked here first: one clear line, nothing sent
    with open(path, "rb") as handle:
        raw = handle.read()
    data = json.loads(raw) if path.endswith(".json") else yaml.safe_load(raw)
    answer = _client(url, token).submit(data)
    click.echo(f"workflow {answer['workflow_id']} ({workflow.name}): {answer['tasks']} tasks")


def _bar(done: int, total: int, width: int = 30) -> str:
    filled = width * done // total if total else width
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


def render_status(status: dict[str, Any]) -> str:
    """The human view of ``tq status``: one line per workflow, then pilots per site."""
    lines = []
    for wf in status["workflows"]:
        counts = wf["tasks"]
        total = sum(counts.values())
        finished = counts.get("done", 0) + counts.get("failed", 0)
        states = " ".join(f"{s}={counts.get(s, 0)}" for s in _STATES)
        lines.append(f"workflow {wf['id']:>4} {wf['name']:<20} {_bar(finished, total)}  {states}")
    if not status["workflows"]:
        lines.append("no workflows")
    lines.append("pilots:")
    if not status["pilots"]:
        lines.append("  none")
    for site, states in sorted(status["pilots"].items()):
        shown = " ".join(f"{state}={n}" for state, n in sorted(states.items()))
        lines.append(f"  {site:<24} {shown}")
    lines.append(f"completions: {status['completions']}")
    return "\n".join(lines)


@tq.command()
@_url
@_token
@click.option("--json", "as_json", is_flag=True, help="Print the raw status as JSON.")
@click.option("--watch", type=float, default=None, help="Refresh every SECONDS until all done.")
def status(url: str | None, token: str | None, as_json: bool, watch: float | None) -> None:
    """Workflows, tasks by state, pilots by site and state."""
    client = _client(url, token)
    while True:
        answer = client.status()
        if as_json:
            click.echo(json.dumps(answer, indent=2, sort_keys=True))
        else:
            if watch is not None and sys.stdout.isatty():
                click.clear()
            click.echo(render_status(answer))
        pending = sum(wf["tasks"].get(s, 0) for wf in answer["workflows"] for s in _STATES[:3])
        if watch is None or pending == 0:
            return
        time.sleep(watch)


@tq.command()
@click.argument("kind", type=click.Choice(["w1", "w2", "w3"]))
@click.option("--scale", type=float, default=1.0, show_default=True, help="Task-count factor.")
@click.option("--size", type=int, default=0, show_default=True, help="Bytes added to each output.")
@click.option("--sleep", type=float, default=0.0, show_default=True, help="Seconds each task runs.")
@click.option("-o", "--output", default="-", show_default=True, help="File to write ('-': stdout).")
def generate(kind: str, scale: float, size: int, sleep: float, output: str) -> None:
    """Write the seed's W1 (chain), W2 (splitting) or W3 (merging) workflow as YAML."""
    from glidein_ext.tq.workflow import generate as make

    if scale <= 0 or size < 0 or sleep < 0:
        raise UsageError("--scale must be > 0, --size and --sleep >= 0")
    text = yaml.safe_dump(make(kind, scale, size, sleep), sort_keys=False, width=1000)
    if output == "-":
        click.echo(text, nl=False)
    else:
        with open(output, "w") as handle:
            handle.write(text)
