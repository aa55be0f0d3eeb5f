"""`.site.ad` plus WLCG Machine/Job Features into a drain order (pure; Sfiligoi 2013, "Requesting
pilot
termination").

Inputs:
- `.site.ad` (written by the site): VACATE_DESIRED (boolean), PAYLOAD_DEADLINE (unix time, a hard
  deadline), and the informational "side benefits" keys SLOT_CPUS and SLOT_MEMORY_MB (the batch
  slot's description; shown, never acted on).
- WLCG Machine/Job Features, directory form: ``$MACHINEFEATURES/shutdowntime`` and
  ``$JOBFEATURES/shutdowntime_job``, the modern equivalents of PAYLOAD_DEADLINE.
- The glidein's own retire time (GLIDEIN_ToRetire), its internal reason to drain.

Rules (documented in docs/glidein.md):
- VACATE_DESIRED = true asks the pilot to drain; PAYLOAD_DEADLINE adds a hard deadline.
- PAYLOAD_DEADLINE without VACATE_DESIRED is a drain order too: a hard deadline means "be gone by".
- VACATE_DESIRED = false cancels the site's order (its PAYLOAD_DEADLINE is then ignored); so does
  removing the file.  A drain is reversible.
- An MJF shutdowntime is a drain order with that deadline, from the machine or job features.
- The deadline is the earliest of all deadlines; the source is the one that set it (or, without
  any deadline, the first source that asked to drain: site.ad, then the glidein itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from glidein_ext.adfile import AdValue, Kind, Schema

VACATE_DESIRED = "VACATE_DESIRED"
PAYLOAD_DEADLINE = "PAYLOAD_DEADLINE"
SLOT_CPUS = "SLOT_CPUS"
SLOT_MEMORY_MB = "SLOT_MEMORY_MB"

SITE_AD_SCHEMA = Schema(
    ".site.ad",
    {
        VACATE_DESIRED: Kind.BOOL,
        PAYLOAD_DEADLINE: Kind.INT,
        SLOT_CPUS: Kind.INT,
        SLOT_MEMORY_MB: Kind.INT,
    },
)

SITE_AD_FILE = ".site.ad"

SOURCE_NONE = "none"
SOURCE_SITE_AD = "site.ad"
SOURCE_MACHINE_FEATURES = "machinefeatures"
SOURCE_JOB_FEATURES = "jobfeatures"
SOURCE_GLIDEIN = "glidein"


@dataclass(frozen=True)
class DrainOrder:
    """What the glidein must do: stop starting jobs (retire), and by when everything must end."""

    retire: bool
    deadline: int | None
    source: str

    @property
    def draining(self) -> bool:
        return self.retire


NO_ORDER = DrainOrder(retire=False, deadline=None, source=SOURCE_NONE)


def drain_order(
    site_ad: Mapping[str, AdValue] | None,
    now: int,
    *,
    machine_shutdown: int | None = None,
    job_shutdown: int | None = None,
    glidein_retire_time: int | None = None,
) -> DrainOrder:
    """Combine every source into one order (see the module docstring for the rules)."""
    asked: list[str] = []
    deadlines: list[tuple[int, str]] = []

    if site_ad is not None:
        vacate = site_ad.get(VACATE_DESIRED)
        deadline = site_ad.get(PAYLOAD_DEADLINE)
        has_deadline = isinstance(deadline, int) and not isinstance(deadline, bool)
        if vacate is True or (vacate is None and has_deadline):
            asked.append(SOURCE_SITE_AD)
            if has_deadline:
                assert isinstance(deadline, int)
                deadlines.append((deadline, SOURCE_SITE_AD))

    if machine_shutdown is not None:
        asked.append(SOURCE_MACHINE_FEATURES)
        deadlines.append((machine_shutdown, SOURCE_MACHINE_FEATURES))
    if job_shutdown is not None:
        asked.append(SOURCE_JOB_FEATURES)
        deadlines.append((job_shutdown, SOURCE_JOB_FEATURES))
    if glidein_retire_time is not None and now >= glidein_retire_time:
        asked.append(SOURCE_GLIDEIN)

    if not asked:
        return NO_ORDER
    if deadlines:
        earliest, source = min(deadlines)
        return DrainOrder(retire=True, deadline=earliest, source=source)
    return DrainOrder(retire=True, deadline=None, source=asked[0])


def usable_time(order: DrainOrder, now: int, todie: int | None) -> int | None:
    """Seconds the glidein can still give to new jobs: 0 when retiring, else until its end.

    None when neither a deadline nor the glidein's end is known.  A frontend uses this so that a
    retiring glidein is not counted as idle.
    """
    if order.retire:
        return 0
    ends = [t for t in (order.deadline, todie) if t is not None]
    if not ends:
        return None
    return max(min(ends) - now, 0)
