"""`glidein-ext hook prepare-job|job-exit`: the starter's job hooks (GLIDEINEXT_HOOK_*).

HTCondor's own invocation takes the fast path in :mod:`glidein_ext.entry`; these click commands
are the same code for humans (and --help).
"""

from __future__ import annotations

import click


@click.group()
def hook() -> None:
    """Starter job hooks: keep .pilot.ad current on job start and exit."""


@hook.command("prepare-job")
@click.option("--start-dir", required=True, help="The glidein's start-up directory.")
@click.argument("extra", nargs=-1)
def prepare_job_cmd(start_dir: str, extra: tuple[str, ...]) -> None:
    """GLIDEINEXT_HOOK_PREPARE_JOB: a job is starting (job ad on stdin)."""
    from glidein_ext.entry import run_hook_command

    del extra
    run_hook_command("prepare-job", start_dir)


@hook.command("job-exit")
@click.option("--start-dir", required=True, help="The glidein's start-up directory.")
@click.argument("reason", nargs=-1)
def job_exit_cmd(start_dir: str, reason: tuple[str, ...]) -> None:
    """GLIDEINEXT_HOOK_JOB_EXIT: a job ended (exit, hold, remove or evict; job ad on stdin)."""
    from glidein_ext.entry import run_hook_command

    del reason
    run_hook_command("job-exit", start_dir)
