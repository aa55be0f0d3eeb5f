"""`glidein-ext site propagate`: the site cron on execute nodes (Sfiligoi 2013, "Propagating Pilot
Information": read the .pilot.ad files and publish them with the prefix PILOT_).

It runs as root on files pilots wrote, so it uses only the safe reader (no symlink is followed,
sizes are capped, only known keys with literals pass) and gives each sandbox a bounded time: a
sandbox on a hung filesystem is reported, never waited for.  It always prints a valid cron
output, even when it fails.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace

from glidein_ext.adfile import read_ad, read_ad_with_stat
from glidein_ext.errors import AdFileError, AdFileMissing
from glidein_ext.glidein.pilotad import PILOT_AD_FILE, PILOT_AD_SCHEMA
from glidein_ext.glidein.sitead import SITE_AD_FILE, SITE_AD_SCHEMA
from glidein_ext.site.publish import CronRun, SandboxReading
from glidein_ext.site.sandboxes import Sandbox, global_job_id, scan_execute_dir

DEFAULT_STALE_AFTER = 600  # seconds without a .pilot.ad update before a heartbeat is stale
DEFAULT_SANDBOX_TIMEOUT = 2.0  # seconds per sandbox


def read_sandbox(sandbox: str, slot: str = "", gjid: str | None = None) -> SandboxReading:
    """Read one sandbox's .pilot.ad (and the site's own .site.ad) with the safe reader."""
    reading = SandboxReading(slot=slot, global_job_id=gjid, sandbox=sandbox)
    errors: list[str] = []
    try:
        values, st = read_ad_with_stat(os.path.join(sandbox, PILOT_AD_FILE), PILOT_AD_SCHEMA)
        reading = replace(reading, pilot_ad=values, heartbeat=int(st.st_mtime))
    except AdFileMissing:
        pass  # not a pilot (yet): its slot gets undefined values
    except AdFileError as exc:
        errors.append(str(exc))
    try:
        reading = replace(
            reading, site_ad=read_ad(os.path.join(sandbox, SITE_AD_FILE), SITE_AD_SCHEMA)
        )
    except AdFileMissing:
        pass
    except AdFileError as exc:
        errors.append(str(exc))
    return replace(reading, error="; ".join(errors))


def bounded(
    func: Callable[[], SandboxReading], timeout: float, fallback: SandboxReading
) -> SandboxReading:
    """Run ``func`` in a daemon thread; ``fallback`` if it takes longer than ``timeout``."""
    result: list[SandboxReading] = []
    thread = threading.Thread(target=lambda: result.append(func()), daemon=True)
    thread.start()
    thread.join(timeout)
    return result[0] if result else fallback


def read_node(
    execute_dir: str, now: int, stale_after: int, timeout: float, proc: str = "/proc"
) -> CronRun:
    """Read every running job's sandbox under ``execute_dir``."""
    errors: list[str] = []
    readings: list[SandboxReading] = []
    try:
        sandboxes: Sequence[Sandbox] = list(scan_execute_dir(execute_dir, proc))
    except OSError as exc:
        return CronRun(now, stale_after, (), (f"cannot scan {execute_dir}: {exc.strerror}",))
    for box in sandboxes:
        base = SandboxReading(
            slot=box.slot, global_job_id=None, sandbox=box.path, error="timed out reading sandbox"
        )

        def one(box: Sandbox = box) -> SandboxReading:
            return read_sandbox(box.path, box.slot, global_job_id(box.path))

        # A bad .pilot.ad is that pilot's problem: it shows in its own slot's PILOT_AD_ERROR.
        readings.append(bounded(one, timeout, base))
    return CronRun(now, stale_after, tuple(readings), tuple(errors))
