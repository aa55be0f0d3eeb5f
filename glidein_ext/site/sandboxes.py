"""Finding the running jobs' sandboxes on an execute node, and their slots (I/O edge).

The starter creates one scratch directory per job, ``$(EXECUTE)/dir_<starter pid>``: the job's
``_CONDOR_SCRATCH_DIR``, and a glidein's start-up directory (where ``.pilot.ad`` lives).  Its
slot comes from the starter's own command line (``condor_starter ... -a slot1_1 ...``), which the
job cannot rewrite, never from files in the sandbox; the job id comes from the starter's
``.job.ad`` in the sandbox and only guards against stale ads (a job that edits it hides only its
own values).  This needs no daemon query, so the cron starts fast and works when the startd is
busy.  Nothing here follows a symlink: entries are checked with ``follow_symlinks=False`` and
files are read with the safe bounded reader.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from glidein_ext.adfile import decode_ad_bytes, read_bounded
from glidein_ext.errors import AdFileError

_DIR = re.compile(r"^dir_([0-9]{1,10})$")
_SLOT = re.compile(r"^slot[0-9]{1,5}(_[0-9]{1,6})?$")
_GLOBAL_JOB_ID = re.compile(
    r'^GlobalJobId[ \t]*=[ \t]*"([A-Za-z0-9_.@:#-]{1,200})"[ \t]*\r?$', re.M
)
MAX_CMDLINE = 16 * 1024
MAX_JOB_AD = 512 * 1024


@dataclass(frozen=True)
class Sandbox:
    """A running job's scratch directory and the slot it runs in."""

    path: str
    starter_pid: int
    slot: str


def starter_slot(pid: int, proc: str = "/proc") -> str | None:
    """The slot id a live condor_starter serves, from its command line; None if not a starter."""
    try:
        data, _ = read_bounded(f"{proc}/{pid}/cmdline", MAX_CMDLINE)
    except AdFileError:
        return None
    return slot_from_cmdline(data)


def slot_from_cmdline(data: bytes) -> str | None:
    """Parse ``condor_starter ... -a <slot> ...`` (NUL-separated argv) into the slot id."""
    args = [a.decode("utf-8", "replace") for a in data.split(b"\0") if a]
    if not args or "condor_starter" not in os.path.basename(args[0]):
        return None
    for flag, value in zip(args, args[1:]):  # itertools.pairwise is Python 3.10+
        if flag == "-a" and _SLOT.match(value):
            return value
    return None


def scan_execute_dir(execute_dir: str, proc: str = "/proc") -> Iterator[Sandbox]:
    """Every ``dir_<pid>`` under ``execute_dir`` whose starter is alive, with its slot."""
    with os.scandir(execute_dir) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            match = _DIR.match(entry.name)
            if match is None or not entry.is_dir(follow_symlinks=False):
                continue
            pid = int(match.group(1))
            slot = starter_slot(pid, proc)
            if slot is not None:
                yield Sandbox(entry.path, pid, slot)


def global_job_id(sandbox: str) -> str | None:
    """GlobalJobId from the starter's ``.job.ad`` in the sandbox; None if absent or unsafe."""
    path = os.path.join(sandbox, ".job.ad")
    try:
        data, _ = read_bounded(path, MAX_JOB_AD)
        text = decode_ad_bytes(data, path)
    except AdFileError:
        return None
    match = _GLOBAL_JOB_ID.search(text)
    return match.group(1) if match else None


def parse_global_job_id(gjid: str) -> tuple[str, int, int] | None:
    """(schedd name, cluster, proc) from ``schedd#cluster.proc#qdate``."""
    parts = gjid.split("#")
    if len(parts) != 3:
        return None
    cluster, _, proc_ = parts[1].partition(".")
    if not (cluster.isdigit() and proc_.isdigit()):
        return None
    return parts[0], int(cluster), int(proc_)
