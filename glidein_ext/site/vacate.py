"""Asking one pilot to leave: `.site.ad` in its sandbox (Sfiligoi 2013, "The semi-automatic
solution": reach the start-up dir, create a .site.ad containing VACATE_DESIRED = true).

Three ways (:class:`Via`):

- ``local``: the sandbox is on this host (found under the local EXECUTE directories by the
  starter's slot and the job's GlobalJobId): write `.site.ad` directly.
- ``job-ad``: from anywhere (a central controller): set the request in the pilot's job ad at its
  schedd; the site cron on its node writes `.site.ad` at its next run (``site/requests.py``).
- ``ssh``: ``condor_ssh_to_job`` runs the same atomic writer (`glidein-ext site-ad write`) in the
  job's sandbox (the paper's way; needs sshd on the nodes).

``auto`` (the default) is ``local`` when the sandbox is here, else ``job-ad``.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from glidein_ext.errors import CondorError, UsageError
from glidein_ext.glidein.siteadwrite import write_site_ad
from glidein_ext.site import pool as site_pool
from glidein_ext.site.pilots import Pilot
from glidein_ext.site.sandboxes import global_job_id, scan_execute_dir

SSH_TIMEOUT = 120.0


class Via(str, Enum):
    AUTO = "auto"
    LOCAL = "local"
    JOB_AD = "job-ad"
    SSH = "ssh"


@dataclass(frozen=True)
class VacateResult:
    pilot: Pilot
    how: str  # "local", "job-ad" or "condor_ssh_to_job"
    where: str  # the sandbox path, or the schedd and job id


def local_sandbox(pilot: Pilot, execute_dirs: Sequence[str], proc: str = "/proc") -> str | None:
    """The pilot's sandbox if it runs on this host: slot id and GlobalJobId must both match."""
    if pilot.global_job_id is None:
        return None
    slot_id = pilot.slot.split("@", 1)[0]
    for execute_dir in execute_dirs:
        try:
            boxes = list(scan_execute_dir(execute_dir, proc))
        except OSError:
            continue
        for box in boxes:
            if box.slot == slot_id and global_job_id(box.path) == pilot.global_job_id:
                return box.path
    return None


def ssh_command(
    pilot: Pilot,
    deadline: int | None,
    remote_bin: str = "glidein-ext",
    ssh: str = "condor_ssh_to_job",
) -> list[str]:
    """The condor_ssh_to_job argv that writes .site.ad in the job's sandbox (its cwd)."""
    if pilot.global_job_id is None or pilot.job_id is None:
        raise UsageError(f"{pilot.slot}: its slot ad has no GlobalJobId; cannot reach the job")
    schedd = pilot.global_job_id.split("#", 1)[0]
    remote = [remote_bin, "site-ad", "write", ".", "--vacate"]
    if deadline is not None:
        remote += ["--deadline", str(deadline)]
    # condor_ssh_to_job hands the command to a remote shell: quote every word.
    return [ssh, "-name", schedd, pilot.job_id, *(shlex.quote(w) for w in remote)]


def vacate(
    pilot: Pilot,
    deadline: int | None,
    execute_dirs: Sequence[str],
    *,
    via: Via = Via.AUTO,
    pool: str | None = None,
    remote_bin: str = "glidein-ext",
) -> VacateResult:
    """Have VACATE_DESIRED = true (and PAYLOAD_DEADLINE) written into the pilot's .site.ad."""
    if via in (Via.AUTO, Via.LOCAL):
        sandbox = local_sandbox(pilot, execute_dirs)
        if sandbox is not None:
            write_site_ad(sandbox, vacate=True, deadline=deadline)
            return VacateResult(pilot, "local", sandbox)
        if via is Via.LOCAL:
            raise CondorError(f"{pilot.slot}: its sandbox is not on this host")
    if via in (Via.AUTO, Via.JOB_AD):
        where = site_pool.request_vacate(pilot, deadline, pool)
        return VacateResult(pilot, "job-ad", where)
    return _vacate_by_ssh(pilot, deadline, remote_bin)


def _vacate_by_ssh(pilot: Pilot, deadline: int | None, remote_bin: str) -> VacateResult:
    argv = ssh_command(pilot, deadline, remote_bin)
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=SSH_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CondorError(f"{pilot.slot}: condor_ssh_to_job failed: {exc}") from exc
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise CondorError(
            f"{pilot.slot}: condor_ssh_to_job: {lines[-1] if lines else proc.returncode}"
        )
    return VacateResult(pilot, "condor_ssh_to_job", pilot.job_id or "")
