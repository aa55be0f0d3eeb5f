"""`glidein-ext hook ...`: the starter's job hooks and the startd's fetch-work hooks.

HTCondor's own invocation takes the fast path in :mod:`glidein_ext.entry`; these click commands
are the same code for humans (and --help).
"""

from __future__ import annotations

import click


@click.group()
def hook() -> None:
    """Job hooks: keep .pilot.ad current on job start and exit; pull Task Queue work."""


@hook.command("prepare-job")
@click.option("--start-dir", required=True, help="The glidein's start-up directory.")
@click.argument("extra", nargs=-1)
def prepare_job_cmd(start_dir: str, extra: tuple[str, ...]) -> None:
    """GLIDEINEXT_HOOK_PREPARE_JOB: a job is starting (job ad on stdin).

    Exit 1 only for a Task Queue task the glidein's agent does not hold (the job is aborted)."""
    from glidein_ext.entry import run_hook_command

    del extra
    status = run_hook_command("prepare-job", start_dir)
    if status:
        raise SystemExit(status)


@hook.command("job-exit")
@click.option("--start-dir", required=True, help="The glidein's start-up directory.")
@click.argument("reason", nargs=-1)
def job_exit_cmd(start_dir: str, reason: tuple[str, ...]) -> None:
    """GLIDEINEXT_HOOK_JOB_EXIT: a job ended (exit, hold, remove or evict; job ad on stdin)."""
    from glidein_ext.entry import run_hook_command

    run_hook_command("job-exit", start_dir, reason[0] if reason else "")


@hook.command("fetch-work")
@click.option("--start-dir", required=True, help="The glidein's start-up directory.")
def fetch_work_cmd(start_dir: str) -> None:
    """GLIDEINEXT_HOOK_FETCH_WORK: print a Task Queue task as a job ad for this slot (slot ad on
    stdin), or nothing."""
    from glidein_ext.entry import run_fetch_command

    run_fetch_command("fetch-work", start_dir)


@hook.command("reply-fetch")
@click.option("--start-dir", required=True, help="The glidein's start-up directory.")
@click.argument("verdict", type=click.Choice(["accept", "reject"]))
def reply_fetch_cmd(start_dir: str, verdict: str) -> None:
    """GLIDEINEXT_HOOK_REPLY_FETCH: the startd took (or refused) the fetched task."""
    from glidein_ext.entry import run_fetch_command

    run_fetch_command("reply-fetch", start_dir, verdict)


@hook.command("evict-claim")
@click.option("--start-dir", required=True, help="The glidein's start-up directory.")
def evict_claim_cmd(start_dir: str) -> None:
    """GLIDEINEXT_HOOK_EVICT_CLAIM: the startd evicts a fetched task's claim."""
    from glidein_ext.entry import run_fetch_command

    run_fetch_command("evict-claim", start_dir)
