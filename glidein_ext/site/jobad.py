"""PILOT_* into the job ads as well (Sfiligoi 2013, "Propagating Pilot Information": UNL used the
job
ClassAd).  Optional (`site propagate --job-ad`): one ``condor_qedit`` per pilot job, with
argv lists (never a shell string) and literal values only, at the job's own schedd."""

from __future__ import annotations

import subprocess

from glidein_ext.glidein.cronout import format_value
from glidein_ext.site.publish import CronRun, SandboxReading, slot_attributes
from glidein_ext.site.sandboxes import parse_global_job_id

QEDIT_TIMEOUT = 10.0


def qedit_command(
    reading: SandboxReading, now: int, stale_after: int, qedit: str = "condor_qedit"
) -> list[str] | None:
    """The condor_qedit argv for one pilot job, or None (no job id, or not a pilot)."""
    if reading.global_job_id is None or reading.pilot_ad is None:
        return None
    parsed = parse_global_job_id(reading.global_job_id)
    if parsed is None:
        return None
    schedd, cluster, proc = parsed
    argv = [qedit, "-name", schedd, f"{cluster}.{proc}"]
    for name, value in slot_attributes(reading, now, stale_after):
        if value is not None:
            argv += [name, format_value(value)]
    return argv


def edit_job_ads(run: CronRun, qedit: str = "condor_qedit") -> list[str]:
    """Run condor_qedit for every pilot job; the errors, one line each."""
    errors: list[str] = []
    for reading in run.readings:
        argv = qedit_command(reading, run.now, run.stale_after, qedit)
        if argv is None:
            continue
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=QEDIT_TIMEOUT, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            errors.append(f"{reading.slot}: condor_qedit: {exc}")
            continue
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            errors.append(
                f"{reading.slot}: condor_qedit: {lines[-1] if lines else proc.returncode}"
            )
    return errors
