"""`glidein-ext hook prepare-job|job-exit`: the starter's job hooks (GLIDEINEXT_HOOK_*).

They read the job ad on stdin, print nothing on stdout, log problems on stderr (the StarterLog) and
always exit 0: a bookkeeping problem must never fail a user job.
"""

from __future__ import annotations

import os
import sys
import time

import click

from glidein_ext.pilot.hooks import MAX_JOB_AD_BYTES


def _read_job_ad() -> str:
    data = sys.stdin.buffer.read(MAX_JOB_AD_BYTES)
    return data.decode("utf-8", errors="replace")


def _report(kind: str, problems: list[str]) -> None:
    for problem in problems:
        sys.stderr.write(f"glidein-ext hook {kind}: {problem}\n")


@click.group()
def hook() -> None:
    """Starter job hooks: keep .pilot.ad current on job start and exit."""


@hook.command("prepare-job")
@click.option("--start-dir", required=True, help="The glidein's start-up directory.")
@click.argument("extra", nargs=-1)
def prepare_job_cmd(start_dir: str, extra: tuple[str, ...]) -> None:
    """GLIDEINEXT_HOOK_PREPARE_JOB: a job is starting (job ad on stdin)."""
    del extra
    from glidein_ext.pilot.hooks import prepare_job

    try:
        _report("prepare-job", prepare_job(start_dir, _read_job_ad(), int(time.time()), os.environ))
    except Exception as exc:  # never fail the job
        _report("prepare-job", [f"internal error: {exc!r}"])


@hook.command("job-exit")
@click.option("--start-dir", required=True, help="The glidein's start-up directory.")
@click.argument("reason", nargs=-1)
def job_exit_cmd(start_dir: str, reason: tuple[str, ...]) -> None:
    """GLIDEINEXT_HOOK_JOB_EXIT: a job ended (exit, hold, remove or evict; job ad on stdin)."""
    del reason
    from glidein_ext.pilot.hooks import job_exit

    try:
        _report("job-exit", job_exit(start_dir, _read_job_ad(), int(time.time()), os.environ))
    except Exception as exc:  # never fail the job
        _report("job-exit", [f"internal error: {exc!r}"])
