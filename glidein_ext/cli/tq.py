"""`glidein-ext tq`: serve the Task Queue, submit workflows, watch them, generate W1/W2/W3, mint
and revoke pilots' credentials."""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import yaml

from glidein_ext.errors import TaskQueueNotFound, UsageError

if TYPE_CHECKING:
    from glidein_ext.tq.client.client import TqClient
    from glidein_ext.tq.client.protocol import Status

URL_ENV = "GLIDEIN_EXT_TQ_URL"
TOKEN_ENV = "GLIDEIN_EXT_TQ_OPERATOR_TOKEN"  # noqa: S105 (a variable name)
CA_ENV = "GLIDEIN_EXT_TQ_CA_FILE"
_STATES = ("waiting", "queued", "running", "done", "failed")
MAX_SCALE = 1000  # `tq generate --scale`: W1 at 1000 is 160 000 tasks


@click.group()
def tq() -> None:
    """The Task Queue (Hasham 2011 §IV): serve it, submit workflows, watch them."""


# The Task Queue service (tq serve) needs this Python; its clients and the pilots run on 3.9.
SERVICE_PYTHON = (3, 11)


@tq.command()
@click.option("--config", "config_file", default=None, help="TOML settings file.")
@click.option("--database", default=None, help="SQLite file path or SQLAlchemy URL.")
@click.option("--host", default=None, help="Address to listen on (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (0: any free port).")
@click.option("--port-file", default=None, help="Write the bound port to this file.")
@click.option("--wait-for-data", type=int, default=None, help="waitForData bound (seconds).")
@click.option("--heartbeat-timeout", type=int, default=None, help="Seconds before a pilot is lost.")
@click.option(
    "--architecture",
    type=click.Choice(["pre-dht", "centralized", "distributed"]),
    default=None,
    help="Sites' architecture unless the sites file says (Delgado Peris 2014; default pre-dht).",
)
@click.option("--master-timeout", type=int, default=None, help="Seconds a silent master keeps it.")
@click.option(
    "--cache-mode", type=click.Choice(["pre-dht", "centralized"]), default=None, hidden=True
)
@click.option("--sites", default=None, help="PilotMonitor sites file: submit pilots by itself.")
@click.option("--monitor-interval", default=None, help="Time between PilotMonitor passes (60s).")
@click.option("--tls-cert", default=None, help="Serve HTTPS only: the certificate chain (PEM).")
@click.option("--tls-key", default=None, help="The certificate's private key (PEM).")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="The service's log on stderr; debug adds one line per request (the request log).",
)
def serve(
    config_file: str | None,
    port_file: str | None,
    monitor_interval: str | None,
    log_level: str,
    **flags: Any,
) -> None:
    """Run the Task Queue service until SIGINT or SIGTERM."""
    if sys.version_info < SERVICE_PYTHON:  # the glidein side runs on 3.9; the service does not
        raise UsageError(f"tq serve needs Python 3.11 or newer (this is {sys.version.split()[0]})")
    from glidein_ext.timefmt import parse_duration
    from glidein_ext.tq.service.server import serve as run_server
    from glidein_ext.tq.service.settings import load_tq_settings

    if monitor_interval is not None:
        flags["monitor_interval"] = parse_duration(monitor_interval)
    settings = load_tq_settings(config_file, overrides=flags)
    _log_to_stderr(log_level)
    run_server(settings, port_file=port_file, announce=lambda line: click.echo(line, err=True))


def _log_to_stderr(level: str = "info") -> None:
    """The Task Queue's own log lines on stderr: the PilotMonitor's decisions, the loops' errors,
    stuck-work warnings (``glidein_ext.tq.stuck``), and at ``debug`` one line per request
    (``glidein_ext.tq.requests``: method, path, status, milliseconds)."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("tq %(asctime)s %(levelname)s %(message)s"))
    logger = logging.getLogger("glidein_ext.tq")
    logger.addHandler(handler)
    logger.setLevel(level.upper())


@tq.command()
@click.option("--sites", "sites_file", required=True, help="PilotMonitor sites file.")
@click.option("--once", is_flag=True, help="One pass, then exit (required: the service loops).")
@click.option("--dry-run", is_flag=True, help="Decide and print; submit nothing, mark nothing.")
@click.option("--config", "config_file", default=None, help="TOML settings file.")
@click.option("--database", default=None, help="SQLite file path or SQLAlchemy URL.")
@click.option("--tq", "url", default=None, help="TQ URL the pilots call (default: settings).")
def monitor(
    sites_file: str,
    once: bool,
    dry_run: bool,
    config_file: str | None,
    database: str | None,
    url: str | None,
) -> None:
    """Run one PilotMonitor pass (Hasham 2011 §IV-A) on the TQ database: what it submits per site,
    why.

    Without --dry-run it submits, like the service does every interval; do not run it next to a
    `tq serve --sites` on the same sites.
    """
    from glidein_ext.tq.manager.monitor import run_cycle
    from glidein_ext.tq.manager.sites import load_sites
    from glidein_ext.tq.service.server import PilotMonitorService, open_store
    from glidein_ext.tq.service.settings import load_tq_settings

    if not once:
        raise UsageError("give --once (the periodic PilotMonitor runs in `tq serve --sites`)")
    sites = load_sites(sites_file)
    settings = load_tq_settings(config_file, overrides={"database": database})
    tq_url = url or f"http://{settings.host}:{settings.port}"
    store = open_store(settings)
    try:
        service = PilotMonitorService(store, sites, tq_url, settings.monitor_interval, issuer=store)
        decisions = run_cycle(store, service.policies, time.time(), dry_run=dry_run)
    finally:
        store.engine.dispose()
    failed = 0
    for decision in decisions:
        verb = "would submit" if dry_run else "submitted"
        state = (
            f"inactive={decision.inactive} idle={decision.idle} busy={decision.busy} "
            f"queued={sum(decision.queued_groups)}"
        )
        limits = decision.limits
        bounds = f"min={limits.min_pilots} max={limits.max_pilots} minIdle={limits.min_idle_pilots}"
        if decision.error is not None:
            failed += 1
            click.echo(f"{decision.site}: failed: {decision.error}")
            continue
        vanished = f" vanished={len(decision.vanished)}" if decision.vanished else ""
        click.echo(
            f"{decision.site}: {verb} {decision.count} ({bounds}; {state}{vanished}): "
            f"{decision.reason}"
        )
    if failed:
        sys.exit(1)


def _client(url: str | None, token: str | None, ca_file: str | None = None) -> TqClient:
    from glidein_ext.tq.client.client import TqClient

    url = url or os.environ.get(URL_ENV)
    token = token or os.environ.get(TOKEN_ENV)
    if not url:
        raise UsageError(f"give --tq URL or set ${URL_ENV}")
    if not token:
        raise UsageError(f"give --token or set ${TOKEN_ENV}")
    return TqClient(url, token, ca_file=ca_file or os.environ.get(CA_ENV) or None)


_url = click.option(
    "--tq",
    "url",
    multiple=True,
    # several instances (Lee 2003): repeated or comma-separated, one string for the client
    callback=lambda _ctx, _param, urls: ",".join(urls) or None,
    help=f"Task Queue URL; several instances: repeat it or use commas (or ${URL_ENV}).",
)
_token = click.option("--token", default=None, help=f"Operator token (or ${TOKEN_ENV}).")
_ca = click.option(
    "--ca-file",
    default=None,
    help=f"CA (PEM) of an https:// Task Queue (or ${CA_ENV}; default: the system's).",
)


@tq.command()
@click.argument("path", type=click.Path(dir_okay=False))
@_url
@_token
@_ca
def submit(path: str, url: str | None, token: str | None, ca_file: str | None) -> None:
    """Submit a workflow file (YAML or JSON); all of it, or nothing."""
    from glidein_ext.tq.workflow import parse_workflow, read_workflow_data

    data = read_workflow_data(path)  # read once, bounded (no YAML aliases, size, depth)
    workflow = parse_workflow(data)  # checked here first: one clear line, nothing sent
    answer = _client(url, token, ca_file).submit(data)
    click.echo(f"workflow {answer.workflow_id} ({workflow.name}): {answer.tasks} tasks")


def _bar(done: int, total: int, width: int = 30) -> str:
    filled = width * done // total if total else width
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


MAX_WARNINGS_SHOWN = 10  # in the human view; --json has them all


def render_status(
    status: Status,
    sites: dict[str, Any] | None = None,
    masters: list[dict[str, Any]] | None = None,
    warnings: list[dict[str, Any]] | None = None,
) -> str:
    """The human view of ``tq status``: one line per workflow, pilots (and each distributed site's
    master) per site, the PilotMonitor, and the stuck-work warnings."""
    lines = []
    for wf in status.workflows:
        counts = wf.tasks
        total = sum(counts.values())
        finished = counts.get("done", 0) + counts.get("failed", 0)
        states = " ".join(f"{s}={counts.get(s, 0)}" for s in _STATES)
        lines.append(f"workflow {wf.id:>4} {wf.name:<20} {_bar(finished, total)}  {states}")
    if not status.workflows:
        lines.append("no workflows")
    lines.append("pilots:")
    master_of = {m["site"]: m for m in masters or ()}
    shown_sites = sorted(set(status.pilots) | set(master_of))
    if not shown_sites:
        lines.append("  none")
    for site in shown_sites:
        by_state = status.pilots.get(site, {})
        shown = " ".join(f"{state}={n}" for state, n in sorted(by_state.items())) or "-"
        master = master_of.get(site)
        if master is not None:
            held = master["master_id"]
            shown += f"  master={held if held is not None else 'none'} epoch={master['epoch']}"
        lines.append(f"  {site:<24} {shown}")
    lines.append(f"completions: {status.completions}")
    failed = sum(wf.tasks.get("failed", 0) for wf in status.workflows)
    if failed:
        lines.append(f"failed tasks: {failed} (why: tq status --tasks --state failed; tq task ID)")
    if sites and sites["sites"]:
        lines.append(f"pilot monitor (every {sites['interval']} s, {sites['passes']} passes):")
        for site in sites["sites"]:
            last = site["last"]
            if last is None:
                decided = "no pass yet"
            elif last["error"]:
                decided = f"last pass failed: {last['error']}"
            else:
                decided = f"last pass submitted {last['count']}"
            lines.append(
                f"  {site['site']:<24} minPilots={site['min_pilots']} "
                f"maxPilots={site['max_pilots']} minIdlePilots={site['min_idle_pilots']}  "
                f"inactive={site['inactive']} idle={site['idle']} busy={site['busy']} "
                f"vanished={site['vanished']}  {decided}"
            )
    shown_warnings = list(warnings or ())
    for warning in shown_warnings[:MAX_WARNINGS_SHOWN]:
        lines.append(f"WARNING {warning['kind']}: {warning['message']}")
    if len(shown_warnings) > MAX_WARNINGS_SHOWN:
        more = len(shown_warnings) - MAX_WARNINGS_SHOWN
        lines.append(f"WARNING and {more} more (tq status --json)")
    return "\n".join(lines)


def render_tasks(tasks: list[dict[str, Any]]) -> str:
    """``tq status --tasks``: one line per task (id, workflow, state, attempt, exit code, pilot,
    site, host, the last line of its report)."""
    lines = [f"{'id':>7} {'wf':>4} {'name':<24} {'state':<8} {'try':>3} {'exit':>4} where  report"]
    for task in tasks:
        where = "-"
        if task["pilot_id"] is not None:
            where = f"pilot {task['pilot_id']}@{task['site'] or '?'}/{task['host'] or '?'}"
        code = "-" if task["exit_code"] is None else str(task["exit_code"])
        lines.append(
            f"{task['id']:>7} {task['workflow_id']:>4} {task['name'][:24]:<24} "
            f"{task['state']:<8} {task['attempt']:>3} {code:>4} {where}  {task['report'] or ''}"
        )
    if not tasks:
        lines.append("(no task)")
    return "\n".join(lines)


def _optional(client: TqClient, path: str) -> Any:
    """An operator's GET that an older service may lack (None then)."""
    try:
        return client.call("GET", path)
    except TaskQueueNotFound:
        return None


WATCH_DEFAULT = 5.0  # seconds, `tq status --watch` without a value


@tq.command()
@click.argument("workflow", type=click.IntRange(1, 2**63 - 1), required=False)
@_url
@_token
@_ca
@click.option("--json", "as_json", is_flag=True, help="Print the raw status as JSON.")
@click.option(
    "--watch",
    type=float,
    is_flag=False,
    flag_value=WATCH_DEFAULT,
    default=None,
    help=f"Refresh every SECONDS ({WATCH_DEFAULT:g} if not given) until all done.",
)
@click.option("--tasks", "list_tasks", is_flag=True, help="List the tasks, one line each.")
@click.option(
    "--state",
    type=click.Choice(_STATES),
    default=None,
    help="With --tasks: only the tasks in this state.",
)
@click.option(
    "--limit",
    type=click.IntRange(1, 10_000),
    default=1000,
    show_default=True,
    help="With --tasks: at most this many.",
)
def status(
    workflow: int | None,
    url: str | None,
    token: str | None,
    ca_file: str | None,
    as_json: bool,
    watch: float | None,
    list_tasks: bool,
    state: str | None,
    limit: int,
) -> None:
    """Workflows, tasks by state, pilots by site and state (and each site's master), warnings.

    With --tasks, the tasks (of WORKFLOW, in --state) one line each: why one failed is in its
    last column; `tq task ID` shows all of it."""
    from glidein_ext.tq.client.protocol import to_json

    if watch is not None and not 0 < watch <= 86400:
        raise UsageError(f"--watch must be in (0, 86400] seconds, got {watch}")
    if (state is not None or workflow is not None) and not list_tasks:
        raise UsageError("WORKFLOW and --state select tasks: give --tasks too")
    client = _client(url, token, ca_file)
    if list_tasks:
        query = f"?limit={limit}"
        query += f"&workflow={workflow}" if workflow is not None else ""
        query += f"&state={state}" if state is not None else ""
        answer = client.call("GET", f"/api/v1/tasks{query}")
        tasks = answer["tasks"] if isinstance(answer, dict) else []
        click.echo(json.dumps(tasks, indent=2) if as_json else render_tasks(tasks))
        return
    while True:
        answer = client.status()
        sites = _optional(client, "/api/v1/sites")  # a service without the PilotMonitor endpoint
        masters = _optional(client, "/api/v1/masters")
        warnings = _optional(client, "/api/v1/warnings")
        if as_json:
            counters = _optional(client, "/api/v1/counters")  # Delgado Peris 2014 §IV: the run
            shown = {
                **to_json(answer),
                "sites": sites,
                "counters": counters,
                "masters": None if masters is None else masters["masters"],
                "warnings": None if warnings is None else warnings["warnings"],
            }
            click.echo(json.dumps(shown, indent=2, sort_keys=True))
        else:
            if watch is not None and sys.stdout.isatty():
                click.clear()
            click.echo(
                render_status(
                    answer,
                    sites,
                    None if masters is None else masters["masters"],
                    None if warnings is None else warnings["warnings"],
                )
            )
        pending = sum(wf.tasks.get(s, 0) for wf in answer.workflows for s in _STATES[:3])
        if watch is None or pending == 0:
            return
        time.sleep(watch)


def render_task(task: dict[str, Any]) -> str:
    """``tq task ID``: every field an operator asks about, then its attempts."""
    from glidein_ext.timefmt import format_relative

    now = int(time.time())

    def when(value: float | None) -> str:
        return "-" if value is None else format_relative(int(value), now)

    where = "-"
    if task["pilot_id"] is not None:
        where = f"pilot {task['pilot_id']} at {task['site'] or '?'} on {task['host'] or '?'}"
    lines = [
        f"task {task['id']} ({task['name']}) of workflow {task['workflow_id']} "
        f"({task['workflow']}), step {task['step']}",
        f"  state:      {task['state']}",
        f"  attempts:   {task['attempt']} (failures {task['failures']}, "
        f"retries allowed {task['max_retries']})",
        f"  exit code:  {'-' if task['exit_code'] is None else task['exit_code']}",
        f"  pilot:      {where}",
        f"  command:    {task['command']}",
        f"  submitted:  {when(task['submitted_at'])}",
        f"  runnable:   {when(task['runnable_since'])}",
        f"  finished:   {when(task['finished_at'])}",
    ]
    if task["why"]:
        lines.append(f"  why:        {task['why']}")
    if task["report"]:
        lines.append("  last report:")
        lines.extend(f"    {line}" for line in task["report"].splitlines()[-20:])
    for item in task["attempts"]:
        result = "ok" if item["ok"] else "failed"
        lines.append(
            f"  attempt {item['attempt']}: {result}, exit {item['exit_code']}, pilot "
            f"{item['pilot_id']} at {item['site'] or '?'} on {item['host'] or '?'}, "
            f"{when(item['at'])}"
        )
    return "\n".join(lines)


@tq.command(name="task")
@click.argument("task_id", type=click.IntRange(1, 2**63 - 1))
@_url
@_token
@_ca
@click.option("--json", "as_json", is_flag=True, help="Print it as JSON.")
def task_command(
    task_id: int, url: str | None, token: str | None, ca_file: str | None, as_json: bool
) -> None:
    """One task: state, attempts, last report and exit code, pilot, site and host, times; for a
    waiting or queued task, why it does not run."""
    answer = _client(url, token, ca_file).call("GET", f"/api/v1/tasks/{task_id}")
    click.echo(json.dumps(answer, indent=2, sort_keys=True) if as_json else render_task(answer))


@tq.command()
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
    else:
        with open(output, "w") as handle:
            handle.write(text)


@tq.group()
def credential() -> None:
    """Per-pilot credentials: mint (bound to a site), list, revoke."""


@credential.command()
@click.option("--site", required=True, help="The site its pilots may register at.")
@click.option("--count", type=click.IntRange(1, 10_000), default=1, show_default=True)
@click.option("--ttl", default=None, help="Valid for this long (24h, 7d, seconds); default: ever.")
@click.option("--note", default="", help="A note for `tq credential list`.")
@click.option(
    "--output-dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Write each secret to DIR/tq-credential-<id> (0600; DIR made 0700) instead of stdout.",
)
@_url
@_token
@_ca
def mint(
    site: str,
    count: int,
    ttl: str | None,
    note: str,
    output_dir: str | None,
    url: str | None,
    token: str | None,
    ca_file: str | None,
) -> None:
    """Mint credentials for pilots of SITE: `ID SECRET` lines (the secrets are shown once).

    Hand a secret to its pilots in a private file (`pilot run --token-file`), never in a job's
    environment or arguments."""
    from glidein_ext.timefmt import parse_duration

    seconds = parse_duration(ttl) if ttl is not None else None
    directory = _private_dir(Path(output_dir)) if output_dir else None
    issued = _client(url, token, ca_file).mint_credentials(site, count, seconds, note)
    for item in issued:
        if directory is None:
            click.echo(f"{item.id} {item.secret}")
            continue
        path = directory / f"tq-credential-{item.id}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(item.secret + "\n")
        click.echo(f"{item.id} {path}")


def _private_dir(directory: Path) -> Path:
    """``directory``, made 0700 if new; refused if group or others may enter it."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = stat.S_IMODE(directory.stat().st_mode)
    if mode & 0o077:
        raise UsageError(f"{directory} is open to group or others (mode {mode:04o}): chmod 700 it")
    return directory


@credential.command(name="list")
@_url
@_token
@_ca
@click.option("--json", "as_json", is_flag=True, help="Print them as JSON.")
def list_credentials(
    url: str | None, token: str | None, ca_file: str | None, as_json: bool
) -> None:
    """Every credential (never a secret): site, state, expiry, batch job, pilots registered."""
    from glidein_ext.timefmt import format_relative

    found = _client(url, token, ca_file).credentials()
    if as_json:
        click.echo(json.dumps([item.to_json() for item in found], indent=2, sort_keys=True))
        return
    now = time.time()
    click.echo(f"{'id':>6} {'site':<20} {'state':<8} {'expires':<20} {'batch':<12} pilots  note")
    for item in found:
        expires = "never"
        if item.expires_at is not None:
            expires = format_relative(int(item.expires_at), int(now))
        click.echo(
            f"{item.id:>6} {item.site:<20} {item.state(now):<8} {expires:<20} "
            f"{item.batch_id or '-':<12} {item.pilots:>6}  {item.note}"
        )


@credential.command()
@click.argument("credential_id", type=click.IntRange(1, 2**63 - 1))
@_url
@_token
@_ca
def revoke(credential_id: int, url: str | None, token: str | None, ca_file: str | None) -> None:
    """Revoke a credential: every later call with it is refused; its pilots end at once."""
    ended = _client(url, token, ca_file).revoke_credential(credential_id)
    click.echo(f"credential {credential_id} revoked; {len(ended)} pilot(s) ended")


from glidein_ext.cli.assign import assign  # noqa: E402  (Delgado Peris 2014 §III.C: the master's assignment)

tq.add_command(assign)
