"""What the site cron prints (pure; Sfiligoi 2013, "Propagating Pilot Information").

The startd cron output is a sequence of ads, each closed by a ``- <name>`` line (HTCondor's
"Startd Cron" output format).  An ad with ``SlotMergeConstraint`` is merged only into the slot
ads for which that expression is true, with the slot as TARGET: so each slot gets its own
pilot's values.  The constraint names the slot (from the starter's command line, which the job
cannot change) and the job (GlobalJobId), so an ad left by a finished job never lands on the
next job of a re-used slot name.

Every per-slot ad carries the same attributes on every run (``undefined`` where there is no
value) because the startd keeps what a cron job stopped printing.  Values are integer or boolean
literals from the safe reader, or sanitized strings: never an expression from a pilot's file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from glidein_ext.adfile import AdValue
from glidein_ext.glidein.cronout import CronValue, classad_string, format_value
from glidein_ext.glidein.sitead import PAYLOAD_DEADLINE, VACATE_DESIRED
from glidein_ext.site import attrs

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.@:#-]{1,200}$")
NODE_AD_NAME = "glideinextsite"


@dataclass(frozen=True)
class SandboxReading:
    """One running job's sandbox as the cron saw it."""

    slot: str  # slot id on this startd, e.g. "slot1_1"
    global_job_id: str | None
    sandbox: str
    pilot_ad: Mapping[str, AdValue] | None = None  # None: no usable .pilot.ad
    heartbeat: int | None = None  # .pilot.ad mtime
    error: str = ""
    site_ad: Mapping[str, AdValue] | None = None


@dataclass(frozen=True)
class CronRun:
    """Everything one cron run publishes."""

    now: int
    stale_after: int
    readings: Sequence[SandboxReading] = field(default_factory=tuple)
    errors: Sequence[str] = field(default_factory=tuple)

    def with_errors(self, more: Sequence[str]) -> CronRun:
        return CronRun(self.now, self.stale_after, self.readings, (*self.errors, *more))


def slot_attributes(
    reading: SandboxReading, now: int, stale_after: int
) -> list[tuple[str, CronValue]]:
    """The PILOT_* (and SITE_*) values for one slot, all names always present."""
    values: dict[str, CronValue] = dict.fromkeys(attrs.PER_SLOT_ATTRS)
    if reading.pilot_ad is not None:
        for key, value in reading.pilot_ad.items():
            values[attrs.PREFIX + key] = value
    if reading.heartbeat is not None:
        age = max(now - reading.heartbeat, 0)
        values[attrs.HEARTBEAT_TIME] = reading.heartbeat
        values[attrs.HEARTBEAT_AGE] = age
        values[attrs.HEARTBEAT_STALE] = age > stale_after
    values[attrs.AD_ERROR] = reading.error
    if reading.site_ad is not None:
        vacate = reading.site_ad.get(VACATE_DESIRED)
        deadline = reading.site_ad.get(PAYLOAD_DEADLINE)
        values[attrs.SITE_VACATE_DESIRED] = vacate if isinstance(vacate, bool) else None
        if isinstance(deadline, int) and not isinstance(deadline, bool):
            values[attrs.SITE_PAYLOAD_DEADLINE] = deadline
    return [(name, values[name]) for name in attrs.PER_SLOT_ATTRS]


def merge_constraint(slot: str, global_job_id: str | None) -> str:
    """SlotMergeConstraint for one slot id (and job): only safe characters ever get here."""
    if not _SAFE_NAME.match(slot) or "@" in slot:
        raise ValueError(f"unsafe slot id {slot!r}")
    prefix = f"{slot}@"
    parts = [f'substr(TARGET.Name, 0, {len(prefix)}) == "{prefix}"']
    if global_job_id is not None:
        if not _SAFE_NAME.match(global_job_id):
            raise ValueError(f"unsafe GlobalJobId {global_job_id!r}")
        parts.append(f'TARGET.GlobalJobId =?= "{global_job_id}"')
    return " && ".join(parts)


def ad_name(slot: str) -> str:
    """The cron ad's unique name for a slot (letters, digits and underscores)."""
    return "pilot_" + re.sub(r"[^A-Za-z0-9_]", "_", slot)


def render(run: CronRun) -> str:
    """The cron's whole output: a node-wide ad, then one ad per running job's slot."""
    node: list[tuple[str, CronValue]] = [
        (attrs.CRON_OK, not run.errors),
        (attrs.CRON_PILOTS, sum(1 for r in run.readings if r.pilot_ad is not None)),
        (attrs.CRON_ERROR, "; ".join(run.errors)),
    ]
    out = [f"{name} = {format_value(value)}\n" for name, value in node]
    out.append(f"- {NODE_AD_NAME}\n")
    for reading in run.readings:
        for name, value in slot_attributes(reading, run.now, run.stale_after):
            out.append(f"{name} = {format_value(value)}\n")
        constraint = merge_constraint(reading.slot, reading.global_job_id)
        out.append(f"SlotMergeConstraint = {constraint}\n")
        out.append(f"- {ad_name(reading.slot)}\n")
    return "".join(out)


def render_failure(message: str) -> str:
    """The output contract when the cron itself fails: still a valid node-wide ad."""
    return (
        f"{attrs.CRON_OK} = false\n{attrs.CRON_PILOTS} = 0\n"
        f"{attrs.CRON_ERROR} = {classad_string(message)}\n- {NODE_AD_NAME}\n"
    )


def describe(reading: SandboxReading, now: int, stale_after: int) -> str:
    """`--start-dir` output: the attributes one sandbox would publish, as `Attr = value` lines."""
    return "".join(
        f"{name} = {format_value(value)}\n"
        for name, value in slot_attributes(reading, now, stale_after)
    )
