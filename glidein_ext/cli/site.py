"""`glidein-ext site ...`: the site admin's commands (Sfiligoi 2013, the site's side).

propagate   the execute-node cron: PILOT_* into each pilot's slot ad
status      what every pilot is doing, as a table
victims     which pilots to ask to leave for N CPUs, and why
vacate      write .site.ad into one pilot's sandbox
controller  do all of that periodically, with hard kills after the deadline
"""

from __future__ import annotations

import sys
import time

import click

from glidein_ext.site.propagate import DEFAULT_STALE_AFTER
from glidein_ext.site.victims import DEFAULT_POLICY, POLICY_NAMES, policies_help

VIA_CHOICES = ("auto", "local", "job-ad", "ssh")  # glidein_ext.site.vacate.Via
# Options more than one command takes, declared once.
POOL = click.option(
    "--pool", "pool_name", default=None, help="Collector host[:port] (default: config)."
)
SLOT_ADS = click.option(
    "--ads", default=None, help="Slot ads in condor_status -long format, instead."
)
EXECUTE_DIRS = click.option(
    "--execute-dir", multiple=True, help="Local EXECUTE dirs (default: config)."
)


@click.group("site")
def site() -> None:
    """The site's side of graceful draining: inspect pilots, pick victims, ask them to leave."""


@site.command("propagate")
@click.option("--execute-dir", default=None, help="The startd's EXECUTE directory (cron mode).")
@click.option("--start-dir", default=None, help="Print what one sandbox would publish, and exit.")
@click.option(
    "--stale-after",
    default=DEFAULT_STALE_AFTER,
    type=int,
    show_default=True,
    help="Heartbeat limit, s (GLIDEIN_EXT_SITE_STALE_AFTER in the cron's config).",
)
@click.option("--timeout", default=2.0, type=float, show_default=True, help="Seconds per sandbox.")
@click.option("--job-ad", is_flag=True, help="Also put PILOT_* into the job ads (condor_qedit).")
@click.option(
    "--schedd-requests",
    type=click.BOOL,
    default=True,
    show_default=True,
    help="Turn vacate requests in the pilots' job ads into their .site.ad (condor_q per schedd).",
)
@click.option("--query-timeout", default=10.0, type=float, show_default=True, help="Per schedd.")
def propagate(
    execute_dir: str | None,
    start_dir: str | None,
    stale_after: int,
    timeout: float,
    job_ad: bool,
    schedd_requests: bool,
    query_timeout: float,
) -> None:
    """Publish every running pilot's .pilot.ad as PILOT_* attributes (startd cron output)."""
    from glidein_ext.site import publish
    from glidein_ext.site.propagate import read_node, read_sandbox
    from glidein_ext.site.requests import apply_job_ad_requests

    now = int(time.time())
    if start_dir is not None:
        reading = read_sandbox(start_dir)
        click.echo(publish.describe(reading, now, stale_after), nl=False)
        if reading.error:
            click.echo(f"glidein-ext: error: {reading.error}", err=True)
            sys.exit(1)
        return
    if execute_dir is None:
        click.echo(publish.render_failure("no --execute-dir given"), nl=False)
        return
    # The cron's contract: always a valid output and exit 0, whatever happens.
    try:
        run = read_node(execute_dir, now, stale_after, timeout)
        if schedd_requests:
            run = apply_job_ad_requests(run, timeout=query_timeout)
        text = publish.render(run)
        if job_ad:
            from glidein_ext.site.jobad import edit_job_ads

            errors = edit_job_ads(run)
            if errors:
                text = publish.render(run.with_errors(errors))
    except Exception as exc:  # noqa: BLE001 -- the cron contract: report the failure, exit 0
        text = publish.render_failure(f"{type(exc).__name__}: {exc}")
    click.echo(text, nl=False)


@site.command("status")
@POOL
@SLOT_ADS
def status(pool_name: str | None, ads: str | None) -> None:
    """What every pilot is doing: CPUs, waste if drained now, time to completion, heartbeat."""
    from glidein_ext.site import pool
    from glidein_ext.site.render import status_table

    pilots = pool.pilots_from_file(ads) if ads else pool.query_pilots(pool_name)
    click.echo(status_table(pilots, int(time.time())), nl=False)


# The victim policy (site.victims.ORDERS), chosen the same way by victims and controller.
_policy = click.option(
    "--policy",
    type=click.Choice(POLICY_NAMES),
    default=DEFAULT_POLICY.value,
    show_default=True,
    help=f"Order within a user: {policies_help()}.",
)


@site.command("victims")
@click.option("--cpus", type=click.IntRange(min=0), required=True, help="CPUs to free.")
@_policy
@POOL
@SLOT_ADS
@click.option("--userprio", default=None, help="condor_userprio output, instead of the negotiator.")
def victims(
    cpus: int, policy: str, pool_name: str | None, ads: str | None, userprio: str | None
) -> None:
    """Which pilots to ask to leave to free CPUS, each with its reason."""
    from glidein_ext.errors import UsageError
    from glidein_ext.site import pool
    from glidein_ext.site.render import selection_table
    from glidein_ext.site.userprio import parse_userprio
    from glidein_ext.site.victims import Policy, choose_victims

    pilots = pool.pilots_from_file(ads) if ads else pool.query_pilots(pool_name)
    if userprio is not None:
        try:
            with open(userprio, encoding="utf-8") as handle:
                prios = parse_userprio(handle.read(), userprio)
        except OSError as exc:
            raise UsageError(f"cannot read {userprio}: {exc.strerror}") from exc
    elif ads is not None:
        prios = {}
    else:
        prios = pool.user_priorities(pool_name)
    selection = choose_victims(pilots, prios, cpus, Policy(policy))
    click.echo(selection_table(selection), nl=False)


def _default_execute_dirs(given: tuple[str, ...]) -> tuple[str, ...]:
    from glidein_ext.site import pool

    if given:
        return given
    execute = pool.local_execute_dir()
    return (execute,) if execute else ()


@site.command("vacate")
@click.argument("job_id", required=False)
@click.option("--slot", default=None, help="The pilot's slot name, instead of its job id.")
@click.option("--deadline", default=None, help="Hard deadline: duration from now (2h) or epoch.")
@POOL
@EXECUTE_DIRS
@click.option(
    "--via",
    type=click.Choice(VIA_CHOICES),
    default="auto",
    show_default=True,
    help="local: the sandbox here; job-ad: through the schedd and the node's site cron "
    "(from anywhere); ssh: condor_ssh_to_job; auto: local if here, else job-ad.",
)
@click.option("--remote-bin", default="glidein-ext", show_default=True, help="On the node (ssh).")
def vacate_cmd(
    job_id: str | None,
    slot: str | None,
    deadline: str | None,
    pool_name: str | None,
    execute_dir: tuple[str, ...],
    via: str,
    remote_bin: str,
) -> None:
    """Ask one pilot to leave: have VACATE_DESIRED (and PAYLOAD_DEADLINE) written into its
    .site.ad."""
    from glidein_ext.errors import UsageError
    from glidein_ext.site import pool
    from glidein_ext.site.vacate import Via, vacate
    from glidein_ext.timefmt import format_time, parse_deadline

    if (job_id is None) == (slot is None):
        raise UsageError("give a JOBID (cluster.proc) or --slot NAME")
    now = int(time.time())
    when = parse_deadline(deadline, now) if deadline is not None else None
    pilots = pool.query_pilots(pool_name)
    if slot is not None:
        found = [p for p in pilots if p.slot == slot]
    else:
        wanted = job_id if job_id and "." in job_id else f"{job_id}.0"
        found = [p for p in pilots if p.job_id == wanted or p.global_job_id == job_id]
    if not found:
        raise UsageError(f"no pilot {slot or job_id} in the pool (is the site cron installed?)")
    if len(found) > 1:
        names = ", ".join(p.slot for p in found)
        raise UsageError(f"{job_id} matches several pilots ({names}); use --slot")
    execute_dirs = _default_execute_dirs(execute_dir) if via in ("auto", "local") else ()
    result = vacate(
        found[0], when, execute_dirs, via=Via(via), pool=pool_name, remote_bin=remote_bin
    )
    deadline_text = f", deadline {format_time(when, now)}" if when is not None else ""
    click.echo(
        f"asked {result.pilot.slot} to vacate via {result.how} ({result.where}){deadline_text}"
    )


@site.command("controller")
@click.option("--owner", required=True, help="The owner (group) the CPUs are freed for.")
@click.option("--cpus", type=click.IntRange(min=0), default=None, help="Free this many CPUs.")
@click.option("--fair-share", is_flag=True, help="Or: reclaim up to the owner's fair share.")
@_policy
@click.option("--grace", default="2h", show_default=True, help="Deadline = now + grace.")
@click.option("--kill-margin", default="60s", show_default=True, help="After the deadline.")
@click.option("--kill", "kill_method", type=click.Choice(["vacate", "remove"]), default="vacate")
@click.option("--kill-stale", is_flag=True, help="Also hard-kill pilots with a stale heartbeat.")
@click.option("--interval", default="60s", show_default=True, help="Seconds between cycles.")
@click.option("--cycles", type=click.IntRange(min=1), default=None, help="Stop after N cycles.")
@POOL
@EXECUTE_DIRS
@click.option("--dry-run", is_flag=True, help="Log the decisions, change nothing.")
def controller(
    owner: str,
    cpus: int | None,
    fair_share: bool,
    policy: str,
    grace: str,
    kill_margin: str,
    kill_method: str,
    kill_stale: bool,
    interval: str,
    cycles: int | None,
    pool_name: str | None,
    execute_dir: tuple[str, ...],
    dry_run: bool,
) -> None:
    """Periodically free CPUs for OWNER: pick victims, ask them, hard-kill after the deadline."""
    import logging

    from glidein_ext.errors import GlideinExtError, UsageError
    from glidein_ext.site.controller import Controller, ControllerConfig
    from glidein_ext.site.demand import Demand
    from glidein_ext.site.pool import KillMethod
    from glidein_ext.site.victims import Policy
    from glidein_ext.timefmt import parse_duration

    if (cpus is None) == (not fair_share):
        raise UsageError("give --cpus N or --fair-share (one of them)")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr
    )
    cfg = ControllerConfig(
        demand=Demand(owner, cpus=cpus, fair_share=fair_share),
        policy=Policy(policy),
        grace=parse_duration(grace),
        kill_margin=parse_duration(kill_margin),
        kill_method=KillMethod(kill_method),
        kill_stale=kill_stale,
        interval=max(parse_duration(interval), 1),
        pool=pool_name,
        execute_dirs=_default_execute_dirs(execute_dir),
    )
    failed = Controller(cfg, dry_run=dry_run).run(cycles)
    if failed:  # only with --cycles: without, it runs until stopped
        raise GlideinExtError(f"{failed} of {cycles} cycle(s) failed (see the log above)")
