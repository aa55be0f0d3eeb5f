"""`glidein-ext hook ...`: the starter's job hooks and the startd's fetch-work hooks.

HTCondor's own invocation takes the fast path in :mod:`glidein_ext.entry`; these click commands
are the same code for humans (and --help).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from glidein_ext.glidein.handoff.hooks import HookResult

MAX_JOB_AD_BYTES = 1024 * 1024
# An option more than one command takes, declared once.
START_DIR = click.option("--start-dir", required=True, help="The glidein's start-up directory.")


def _stdin_text() -> str:
    return sys.stdin.buffer.read(MAX_JOB_AD_BYTES).decode("utf-8", errors="replace")


def _emit(kind: str, result: HookResult) -> None:
    for problem in result.problems:
        click.echo(f"glidein-ext hook {kind}: {problem}", err=True)
    if result.out:
        click.echo(result.out, nl=False)
    if result.status:
        raise SystemExit(result.status)


def _job_hook(kind: str, start_dir: str, reason: str) -> None:
    from glidein_ext.glidein.hooks import run_job_hook

    _emit(kind, run_job_hook(kind, start_dir, reason, _stdin_text()))


def _fetch_hook(kind: str, start_dir: str, verdict: str = "") -> None:
    from glidein_ext.glidein.handoff.hooks import run_fetch_hook

    _emit(kind, run_fetch_hook(kind, start_dir, verdict, _stdin_text()))


@click.group()
def hook() -> None:
    """Job hooks: keep .pilot.ad current on job start and exit; pull Task Queue work."""


@hook.command("prepare-job")
@START_DIR
@click.argument("extra", nargs=-1)
def prepare_job_cmd(start_dir: str, extra: tuple[str, ...]) -> None:
    """GLIDEINEXT_HOOK_PREPARE_JOB: a job is starting (job ad on stdin).

    Exit 1 only for a Task Queue task the glidein's agent does not hold (the job is aborted)."""
    del extra
    _job_hook("prepare-job", start_dir, "")


@hook.command("job-exit")
@START_DIR
@click.argument("reason", nargs=-1)
def job_exit_cmd(start_dir: str, reason: tuple[str, ...]) -> None:
    """GLIDEINEXT_HOOK_JOB_EXIT: a job ended (exit, hold, remove or evict; job ad on stdin)."""
    _job_hook("job-exit", start_dir, reason[0] if reason else "")


@hook.command("fetch-work")
@START_DIR
def fetch_work_cmd(start_dir: str) -> None:
    """GLIDEINEXT_HOOK_FETCH_WORK: print a Task Queue task as a job ad for this slot (slot ad on
    stdin), or nothing."""
    _fetch_hook("fetch-work", start_dir)


@hook.command("reply-fetch")
@START_DIR
@click.argument("verdict", type=click.Choice(["accept", "reject"]))
def reply_fetch_cmd(start_dir: str, verdict: str) -> None:
    """GLIDEINEXT_HOOK_REPLY_FETCH: the startd took (or refused) the fetched task."""
    _fetch_hook("reply-fetch", start_dir, verdict)


@hook.command("evict-claim")
@START_DIR
def evict_claim_cmd(start_dir: str) -> None:
    """GLIDEINEXT_HOOK_EVICT_CLAIM: the startd evicts a fetched task's claim."""
    _fetch_hook("evict-claim", start_dir)
