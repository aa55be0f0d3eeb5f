"""Asking one pilot to leave: `.site.ad` in its sandbox (seed 003, "The semi-automatic
solution": reach the start-up dir, create a .site.ad containing VACATE_DESIRED = true).

Directly when the sandbox is on this host (found under the local EXECUTE directories by the
starter's slot and the job's GlobalJobId), else through ``condor_ssh_to_job``, which runs the
very same atomic writer (`glidein-ext site-ad write`) in the job's sandbox on its node.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from glidein_ext.errors import CondorError, UsageError
from glidein_ext.glidein.siteadwrite import write_site_ad
from glidein_ext.site.pilots import Pilot
from glidein_ext.site.sandboxes import global_job_id, scan_execute_dir

SSH_TIMEOUT = 120.0


@dataclass(frozen=True)
class VacateResult:
    pilot: Pilot
    how: str  # "local" or "condor_ssh_to_job"
    where: str  # the sandbox path, or the job id


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
    remote_bin: str = "glidein-ext",
    allow_ssh: bool = True,
) -> VacateResult:
    """Write VACATE_DESIRED = true (and PAYLOAD_DEADLINE) into the pilot's .site.ad."""
    sandbox = local_sandbox(pilot, execute_dirs)
    if sandbox is not None:
        write_site_ad(sandbox, vacate=True, deadline=deadline)
        return VacateResult(pilot, "local", sandbox)
    if not allow_ssh:
        raise CondorError(f"{pilot.slot}: its sandbox is not on this host")
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
