"""A pilot as the site sees it, from its slot ad (pure; Sfiligoi 2013, "Selecting the cooperative
victim": owner, CPUs, and the PILOT_* values the site cron published)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from glidein_ext.site import attrs


@dataclass(frozen=True)
class Pilot:
    """One running pilot job, in one slot."""

    slot: str  # the slot's Name
    owner: str  # the negotiator's submitter name (AccountingGroup, else RemoteUser)
    cpus: int
    global_job_id: str | None = None
    used1k: int | None = None
    waste1k: int | None = None
    uncommitted1k: int | None = None
    last_exp_job_end: int | None = None
    priority_factor: int | None = None
    can_postpone: bool | None = None
    cached_needed_mb: int | None = None  # PILOT_CACHED_INPUT_NEEDED_MB
    heartbeat_age: int | None = None
    stale: bool = False
    site_vacate: bool = False
    site_deadline: int | None = None
    address: str | None = None  # the startd's MyAddress, for a hard kill

    @property
    def draining(self) -> bool:
        """Already leaving: it said so (CAN_POSTPONE_LAST_JOB false) or the site asked it to."""
        return self.can_postpone is False or self.site_vacate

    @property
    def job_id(self) -> str | None:
        """``cluster.proc`` from the GlobalJobId."""
        if self.global_job_id is None:
            return None
        parts = self.global_job_id.split("#")
        return parts[1] if len(parts) == 3 else None


def _int(ad: Mapping[str, Any], key: str) -> int | None:
    value = ad.get(key)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return int(value)
    return None


def _bool(ad: Mapping[str, Any], key: str) -> bool | None:
    value = ad.get(key)
    return value if isinstance(value, bool) else None


def _str(ad: Mapping[str, Any], key: str) -> str | None:
    value = ad.get(key)
    return value if isinstance(value, str) and value else None


def is_pilot_slot(ad: Mapping[str, Any]) -> bool:
    """A slot running a job whose sandbox held a .pilot.ad (or a bad one) at the last cron run.

    Our site cron adds its heartbeat attributes; a cron of the paper's prototype (or another site's)
    publishes only the prefixed ``.pilot.ad`` values (Sfiligoi 2013,
    "Propagating Pilot Information": "prepend PILOT_ to all attribute names"), which is enough to be
    a pilot.
    """
    if _int(ad, attrs.HEARTBEAT_TIME) is not None or _str(ad, attrs.AD_ERROR):
        return True
    return any(ad.get(name) is not None for name in attrs.PILOT_ATTRS)


def pilot_from_ad(ad: Mapping[str, Any]) -> Pilot | None:
    """The pilot in a slot ad (plain values, as from condor_status -json), or None."""
    slot = _str(ad, "Name")
    if slot is None or not is_pilot_slot(ad):
        return None
    owner = _str(ad, "AccountingGroup") or _str(ad, "RemoteUser") or _str(ad, "RemoteOwner") or "?"
    return Pilot(
        slot=slot,
        owner=owner,
        cpus=_int(ad, "Cpus") or 1,
        global_job_id=_str(ad, "GlobalJobId"),
        used1k=_int(ad, "PILOT_USED_FRACTION1k"),
        waste1k=_int(ad, "PILOT_ADD_FINAL_EXP_WASTE1k"),
        uncommitted1k=_int(ad, "PILOT_ADD_UNCOM_TIME1k"),
        last_exp_job_end=_int(ad, "PILOT_LAST_EXP_JOB_END"),
        priority_factor=_int(ad, "PILOT_PRIORITY_FACTOR"),
        can_postpone=_bool(ad, "PILOT_CAN_POSTPONE_LAST_JOB"),
        cached_needed_mb=_int(ad, "PILOT_CACHED_INPUT_NEEDED_MB"),
        heartbeat_age=_int(ad, attrs.HEARTBEAT_AGE),
        stale=_bool(ad, attrs.HEARTBEAT_STALE) is True,
        site_vacate=_bool(ad, attrs.SITE_VACATE_DESIRED) is True,
        site_deadline=_int(ad, attrs.SITE_PAYLOAD_DEADLINE),
        address=_str(ad, "MyAddress"),
    )
