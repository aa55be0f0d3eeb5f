"""`tq status` (workflows, tasks, pilots and masters by site, the PilotMonitor, warnings; once or
--watch) and `tq task ID` (one task and its attempts), with their human renderings."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from glidein_ext.cli.tq.options import ca_option, operator_client, token_option, url_option
from glidein_ext.errors import TaskQueueNotFound, UsageError
from glidein_ext.escape import shown as _s

if TYPE_CHECKING:
    from glidein_ext.tq.client.client import TqClient
    from glidein_ext.tq.client.protocol import Status

_STATES = ("waiting", "queued", "running", "done", "failed")


def _bar(done: int, total: int, width: int = 30) -> str:
    filled = width * done // total if total else width
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


MAX_WARNINGS_SHOWN = 10  # in the human view; --json has them all


def render_status(
    status: Status,
    sites: dict[str, Any] | None = None,
    masters: list[dict[str, Any]] | None = None,
    warnings: list[dict[str, Any]] | None = None,
    phases: dict[str, dict[str, float]] | None = None,
) -> str:
    """The human view of ``tq status``: one line per workflow, pilots (and each distributed site's
    master, and where its rounds' time goes: ``phases``) per site, the PilotMonitor, and the
    stuck-work warnings."""
    lines = []
    for wf in status.workflows:
        counts = wf.tasks
        total = sum(counts.values())
        finished = counts.get("done", 0) + counts.get("failed", 0)
        states = " ".join(f"{s}={counts.get(s, 0)}" for s in _STATES)
        lines.append(f"workflow {wf.id:>4} {_s(wf.name):<20} {_bar(finished, total)}  {states}")
    if not status.workflows:
        lines.append("no workflows")
    lines.append("pilots:")
    master_of = {m["site"]: m for m in masters or ()}
    shown_sites = sorted(set(status.pilots) | set(master_of))
    if not shown_sites:
        lines.append("  none")
    for site in shown_sites:
        by_state = status.pilots.get(site, {})
        shown = " ".join(f"{_s(state)}={n}" for state, n in sorted(by_state.items())) or "-"
        master = master_of.get(site)
        if master is not None:
            held = master["master_id"]
            shown += f"  master={held if held is not None else 'none'} epoch={master['epoch']}"
        lines.append(f"  {_s(site):<24} {shown}")
        spent = (phases or {}).get(site)
        if spent and sum(spent.values()) > 0:
            lines.append(f"    {_round_time(spent)}")
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
                decided = f"last pass failed: {_s(last['error'])}"
            else:
                decided = f"last pass submitted {last['count']}"
            lines.append(
                f"  {_s(site['site']):<24} minPilots={site['min_pilots']} "
                f"maxPilots={site['max_pilots']} minIdlePilots={site['min_idle_pilots']}  "
                f"inactive={site['inactive']} idle={site['idle']} busy={site['busy']} "
                f"vanished={site['vanished']}  {decided}"
            )
    shown_warnings = list(warnings or ())
    for warning in shown_warnings[:MAX_WARNINGS_SHOWN]:
        lines.append(f"WARNING {_s(warning['kind'])}: {_s(warning['message'])}")
    if len(shown_warnings) > MAX_WARNINGS_SHOWN:
        more = len(shown_warnings) - MAX_WARNINGS_SHOWN
        lines.append(f"WARNING and {more} more (tq status --json)")
    return "\n".join(lines)


def _round_time(spent: dict[str, float]) -> str:
    """Where a site's master rounds spent their time, largest share first (Delgado Peris 2014
    §III.B-C: wait, sync, broadcast, replies, solve, tq_assign, hand_out, probe)."""
    total = sum(spent.values())
    shares = sorted(spent.items(), key=lambda item: (-item[1], item[0]))
    parts = ", ".join(f"{phase} {100 * seconds / total:.0f}%" for phase, seconds in shares)
    return f"rounds: {total:.1f} s in all: {parts}"


def render_tasks(tasks: list[dict[str, Any]]) -> str:
    """``tq status --tasks``: one line per task (id, workflow, state, attempt, exit code, pilot,
    site, host, the last line of its report; a queued task's short why instead)."""
    lines = [f"{'id':>7} {'wf':>4} {'name':<24} {'state':<8} {'try':>3} {'exit':>4} where  report"]
    for task in tasks:
        where = "-"
        if task["pilot_id"] is not None:
            where = f"pilot {task['pilot_id']}@{_s(task['site'] or '?')}/{_s(task['host'] or '?')}"
        code = "-" if task["exit_code"] is None else str(task["exit_code"])
        lines.append(
            f"{task['id']:>7} {task['workflow_id']:>4} {_s(task['name'])[:24]:<24} "
            f"{task['state']:<8} {task['attempt']:>3} {code:>4} {where}  "
            f"{_s(task['report'] or _waits(task))}"
        )
    if not tasks:
        lines.append("(no task)")
    return "\n".join(lines)


def _waits(task: dict[str, Any]) -> str:
    """A queued task's short why (an older service sends none)."""
    why = task.get("why")
    return f"waits: {why}" if why else ""


def _optional(client: TqClient, path: str) -> Any:
    """An operator's GET that an older service may lack (None then)."""
    try:
        return client.call("GET", path)
    except TaskQueueNotFound:
        return None


WATCH_DEFAULT = 5.0  # seconds, `tq status --watch` without a value


@click.command()
@click.argument("workflow", type=click.IntRange(1, 2**63 - 1), required=False)
@url_option
@token_option
@ca_option
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
    """Workflows (WORKFLOW alone if given), tasks by state, pilots by site and state (and each
    site's master), warnings.

    With --tasks, the tasks (of WORKFLOW, in --state) one line each: why one failed is in its
    last column; `tq task ID` shows all of it."""
    from glidein_ext.tq.client.protocol import to_json

    if watch is not None and not 0 < watch <= 86400:
        raise UsageError(f"--watch must be in (0, 86400] seconds, got {watch}")
    if state is not None and not list_tasks:
        raise UsageError("--state selects tasks: give --tasks too")
    client = operator_client(url, token, ca_file)
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
        if workflow is not None:  # `tq status 99`: that workflow alone
            answer = _only_workflow(answer, workflow)
        sites = _optional(client, "/api/v1/sites")  # a service without the PilotMonitor endpoint
        masters = _optional(client, "/api/v1/masters")
        warnings = _optional(client, "/api/v1/warnings")
        counters = _optional(client, "/api/v1/counters")  # Delgado Peris 2014 §IV: the run
        if as_json:
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
                    None if counters is None else counters.get("phases"),
                )
            )
        pending = sum(wf.tasks.get(s, 0) for wf in answer.workflows for s in _STATES[:3])
        if watch is None or pending == 0:
            return
        time.sleep(watch)


def _only_workflow(answer: Status, workflow: int) -> Status:
    """The status with one workflow's line (pilots, completions and warnings as they are);
    TaskQueueNotFound, one line, when the Task Queue has no such workflow."""
    from dataclasses import replace

    shown = tuple(wf for wf in answer.workflows if wf.id == workflow)
    if not shown:
        raise TaskQueueNotFound(f"workflow {workflow} does not exist")
    return replace(answer, workflows=shown)


def render_task(task: dict[str, Any]) -> str:
    """``tq task ID``: every field an operator asks about, then its attempts."""
    from glidein_ext.timefmt import format_relative

    now = int(time.time())

    def when(value: float | None) -> str:
        return "-" if value is None else format_relative(int(value), now)

    where = "-"
    if task["pilot_id"] is not None:
        site, host = _s(task["site"] or "?"), _s(task["host"] or "?")
        where = f"pilot {task['pilot_id']} at {site} on {host}"
    lines = [
        f"task {task['id']} ({_s(task['name'])}) of workflow {task['workflow_id']} "
        f"({_s(task['workflow'])}), step {_s(task['step'])}",
        f"  state:      {_s(task['state'])}",
        f"  attempts:   {task['attempt']} (failures {task['failures']}, "
        f"retries allowed {task['max_retries']})",
        f"  exit code:  {'-' if task['exit_code'] is None else task['exit_code']}",
        f"  pilot:      {where}",
        f"  command:    {_s(task['command'])}",
        f"  submitted:  {when(task['submitted_at'])}",
        f"  runnable:   {when(task['runnable_since'])}",
        f"  finished:   {when(task['finished_at'])}",
    ]
    asks = task.get("asks")  # an older service sends none
    if asks:
        lines.append(f"  requirements: {_s(asks['requirements'])}")
        lines.append(f"  rank:       {_s(asks['rank'])}")
        lines.append(
            f"  requests:   cpus {asks['request_cpus']}, memory {asks['request_memory']} MB, "
            f"disk {asks['request_disk']} MB, max runtime {asks['max_runtime']} s"
        )
    if task["why"]:
        lines.append(f"  why:        {_s(task['why'])}")
    analysed = task.get("analysis")
    if analysed:
        lines.append(_analysis_head(analysed))
        lines.extend(
            f"    {_s(_condition(item, analysed['examined']))}" for item in analysed["conditions"]
        )
    if task["report"]:
        lines.append("  last report:")
        lines.extend(f"    {_s(line)}" for line in task["report"].splitlines()[-20:])
    for item in task["attempts"]:
        result = "ok" if item["ok"] else "failed"
        lines.append(
            f"  attempt {item['attempt']}: {result}, exit {item['exit_code']}, pilot "
            f"{item['pilot_id']} at {_s(item['site'] or '?')} on {_s(item['host'] or '?')}, "
            f"{when(item['at'])}"
        )
    return "\n".join(lines)


def _analysis_head(analysed: dict[str, Any]) -> str:
    """The head of ``tq task``'s analysis (condor_q -better-analyze's, for one task)."""
    examined, live = analysed["examined"], analysed["live"]
    over = f"{live} live pilot(s)" if examined == live else f"the first {examined} of {live}"
    return f"  analysis over {over}: {analysed['matching']} meet every condition"


def _condition(item: dict[str, Any], examined: int) -> str:
    if item["rejects"] is None:
        return f"{item['text']}: {item['note']}"
    said = f"{item['text']}: rejects {item['rejects']} of {examined}"
    return f"{said}; {item['nearest']}" if item["nearest"] and item["rejects"] else said


@click.command(name="task")
@click.argument("task_id", type=click.IntRange(1, 2**63 - 1))
@url_option
@token_option
@ca_option
@click.option("--json", "as_json", is_flag=True, help="Print it as JSON.")
def task_command(
    task_id: int, url: str | None, token: str | None, ca_file: str | None, as_json: bool
) -> None:
    """One task: state, attempts, last report and exit code, pilot, site and host, times; for a
    waiting or queued task, why it does not run."""
    answer = operator_client(url, token, ca_file).call("GET", f"/api/v1/tasks/{task_id}")
    click.echo(json.dumps(answer, indent=2, sort_keys=True) if as_json else render_task(answer))
