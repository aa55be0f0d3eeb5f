"""The startd cron job and the starter's job hooks (I/O edge over :mod:`refresh`).

- ``cron``: every STARTD_CRON_GLIDEINEXT_PERIOD (and at once on reconfig, which the wrapper triggers
  when `.site.ad` changes): drop jobs whose starter is gone, rewrite `.pilot.ad` (its mtime is the
  heartbeat) and return the slot attributes to print.  Never raises.
- ``prepare_job`` / ``job_exit``: GLIDEINEXT_HOOK_PREPARE_JOB and GLIDEINEXT_HOOK_JOB_EXIT, run by
  the condor_starter with the job ad on stdin; they update the job table and `.pilot.ad` at once.
  They never fail the job: problems are returned as messages for stderr (the StarterLog).
  :func:`run_job_hook` is the whole hook (with a Task Queue task's part, ``handoff.hooks``): it
  returns what to print and the exit status, for ``glidein_ext.entry`` and ``glidein-ext hook``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from glidein_ext.errors import GlideinExtError
from glidein_ext.glidein import jobtable
from glidein_ext.glidein.cronout import CronReport
from glidein_ext.glidein.info import load_info, save_info
from glidein_ext.glidein.jobad import job_cpus, job_id, job_start, parse_job_ad
from glidein_ext.glidein.jobtimes import resolve_job_times
from glidein_ext.glidein.pilotad import RunningJob
from glidein_ext.glidein.refresh import refresh
from glidein_ext.glidein.sitead import NO_ORDER
from glidein_ext.procs import start_ticks

if TYPE_CHECKING:
    from glidein_ext.glidein.handoff.hooks import HookResult


def run_cron(
    start_dir: str | None, now: int, env: Mapping[str, str], config_todie: str | None = None
) -> CronReport:
    """One startd cron run; always returns a report, whatever failed.

    ``config_todie`` is GLIDEIN_ToDie as the HTCondor config knows it (glideinWMS computes it after
    the custom scripts ran); a positive value different from glidein.json's is stored there.
    """
    if not start_dir:
        return CronReport(NO_ORDER, now, None, None, None, ("no --start-dir given",))
    problems: list[str] = []
    try:
        problems.extend(_adopt_todie(start_dir, config_todie))
        result = refresh(start_dir, now, env, prune_dead_starters=True)
        result.errors[:0] = problems
    except Exception as exc:  # noqa: BLE001 -- the cron contract holds even for a bug: report it
        return CronReport(NO_ORDER, now, None, None, None, (f"internal error: {exc!r}",))
    todie = result.info.todie if result.info else None
    heartbeat = now if result.written else None
    return CronReport(
        result.order, now, todie, result.running_jobs, heartbeat, tuple(result.errors)
    )


def _adopt_todie(start_dir: str, todie: str | None) -> list[str]:
    if todie is None or not todie.strip().isdigit() or int(todie) <= 0:
        return []
    try:
        info = load_info(start_dir)
    except GlideinExtError:
        return []  # refresh() reports a missing or bad glidein.json once
    if info.todie == int(todie):
        return []
    try:
        save_info(start_dir, replace(info, todie=int(todie)))
    except GlideinExtError as exc:
        return [str(exc)]
    return []


def prepare_job(start_dir: str, job_ad_text: str, now: int, env: Mapping[str, str]) -> list[str]:
    """Record a starting job; returns problems to log (empty when all went well)."""
    problems: list[str] = []
    ad = parse_job_ad(job_ad_text)
    jid = job_id(ad)
    if jid is None:
        return ["job ad has neither GlobalJobId nor ClusterId/ProcId; job not tracked"]
    try:
        info = load_info(start_dir)
        start = job_start(ad, now)
        times = resolve_job_times(
            ad, start, info.todie, info.expected_sources(), info.max_sources()
        )
        job = RunningJob(jid, job_cpus(ad), start, times.expected_end, times.max_end)
        starter = os.getppid()
        tracked = jobtable.TrackedJob(job, starter, start_ticks(starter))
        jobtable.update_table(start_dir, lambda t: t.started(tracked))
    except GlideinExtError as exc:
        problems.append(str(exc))
    problems.extend(refresh(start_dir, now, env).errors)
    return problems


def job_exit(start_dir: str, job_ad_text: str, now: int, env: Mapping[str, str]) -> list[str]:
    """Forget an ending job; returns problems to log."""
    problems: list[str] = []
    jid = job_id(parse_job_ad(job_ad_text))
    if jid is None:
        problems.append("job ad has neither GlobalJobId nor ClusterId/ProcId")
    else:
        try:
            jobtable.update_table(start_dir, lambda t: t.ended(jid))
        except GlideinExtError as exc:
            problems.append(str(exc))
    problems.extend(refresh(start_dir, now, env).errors)
    return problems


def run_job_hook(kind: str, start_dir: str, reason: str, stdin_text: str) -> HookResult:
    """A starter job hook (``prepare-job`` or ``job-exit``, job ad in ``stdin_text``): prints
    nothing; problems for stderr (the StarterLog).  Exit status 0 whatever happens (a
    bookkeeping problem must never fail a user job), except for a Task Queue task its agent
    refuses or cannot confirm at ``prepare-job``: 1, which makes the starter abort the job
    rather than run a task nobody would report."""
    from glidein_ext.glidein.handoff import hooks as handoff_hooks  # the cron does not need it

    status = 0
    problems: list[str] = []
    try:
        ad = parse_job_ad(stdin_text)
        if kind == "prepare-job":
            try:
                handoff_hooks.task_starting(start_dir, ad, os.getppid())
            except Exception as exc:  # noqa: BLE001 -- fail closed: the task must not run
                problems.append(f"task not started: {exc}")
                status = 1
        else:
            try:
                handoff_hooks.task_exited(start_dir, ad, reason)
            except Exception as exc:  # noqa: BLE001 -- the job is over: report, never fail it
                problems.append(f"the agent was not told of the task's end: {exc}")
        if status == 0:
            handler = prepare_job if kind == "prepare-job" else job_exit
            problems += handler(start_dir, stdin_text, int(time.time()), os.environ)
    except Exception as exc:  # noqa: BLE001 -- a hook must never fail the job: report it
        problems.append(f"internal error: {exc!r}")
    return handoff_hooks.HookResult(problems=tuple(problems), status=status)
