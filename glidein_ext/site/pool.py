"""The one boundary over HTCondor for the site tools (htcondor2; ads through ``classads``).

Queries the collector for pilot slots and the negotiator for user priorities, reads
``condor_status -long`` files, and hard-kills a pilot.  Every HTCondor error becomes a
CondorError here.  htcondor2 is imported inside the functions: nothing happens at import, and
`site propagate` (the cron) never loads it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from enum import Enum
from typing import Any

from glidein_ext.condor import JobStatus, collector, condor_errors, schedd, schedds
from glidein_ext.errors import ClassAdError, CondorError, MissingDependencyError, UsageError
from glidein_ext.site import attrs
from glidein_ext.site.pilots import Pilot, pilot_from_ad
from glidein_ext.site.requests import (
    DEADLINE_ATTR,
    VACATE_ATTR,
    SiteRequest,
    qedit_values,
    request_from_values,
)
from glidein_ext.site.sandboxes import parse_global_job_id

# A pilot slot: our site cron's heartbeat or error attributes, or any of the paper's PILOT_* values
# (published by the paper's prototype or another site's cron, without our heartbeat attributes).
PILOT_CONSTRAINT = " || ".join(
    f"{name} =!= undefined" for name in (attrs.HEARTBEAT_TIME, attrs.AD_ERROR, *attrs.PILOT_ATTRS)
)


class KillMethod(Enum):
    """How the site hard-kills a pilot (site policy)."""

    VACATE = "vacate"  # the startd evicts the job fast (condor_vacate -fast): the site's own tool
    REMOVE = "remove"  # the job's schedd removes it (condor_rm): for a site that owns the CE


def _binding(name: str, shown: str | None = None) -> Any:
    """htcondor2, or glidein_ext.classads (classad2's boundary), imported on first need (the
    ``[site]`` extra; never at import); ``shown``: the binding named when it is missing."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise MissingDependencyError(
            f"this site command needs HTCondor's Python bindings ({shown or name}): "
            "pip install '.[site]' in a glidein-ext checkout or use the node's HTCondor python"
        ) from exc


def _classads() -> Any:
    return _binding("glidein_ext.classads", "classad2")


def plain(ad: Any) -> dict[str, Any]:
    """A classad2 ad as plain Python values (expressions that do not evaluate become None)."""
    values: dict[str, Any] = _classads().plain_values(ad)
    return values


def query_slot_ads(
    pool: str | None = None, constraint: str = PILOT_CONSTRAINT
) -> list[dict[str, Any]]:
    """Slot ads (plain values) from the collector."""
    htcondor2 = _binding("htcondor2")

    with condor_errors(f"cannot query the collector {pool or '(default)'}"):
        ads = collector(htcondor2, pool).query(htcondor2.AdType.Startd, constraint=constraint)
    return [plain(ad) for ad in ads]


def local_execute_dir() -> str | None:
    """This machine's startd EXECUTE directory from the local HTCondor configuration, if any."""
    htcondor2 = _binding("htcondor2")

    with condor_errors("cannot read the local HTCondor configuration (EXECUTE)"):
        execute = htcondor2.param.get("EXECUTE")
    return execute if isinstance(execute, str) and execute else None


def query_pilots(pool: str | None = None) -> list[Pilot]:
    return [p for p in (pilot_from_ad(ad) for ad in query_slot_ads(pool)) if p is not None]


def parse_slot_ads(text: str, source: str) -> list[dict[str, Any]]:
    """Slot ads in ``condor_status -long`` format (blank-line separated old ClassAds)."""
    classads = _classads()
    try:
        ads = classads.parse_old_ads(text)
    except ClassAdError as exc:
        raise UsageError(f"{source}: not condor_status -long output: {exc}") from exc
    return [classads.plain_values(ad) for ad in ads]


def pilots_from_file(path: str) -> list[Pilot]:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from exc
    return [p for p in (pilot_from_ad(ad) for ad in parse_slot_ads(text, path)) if p is not None]


def user_priorities(pool: str | None = None) -> dict[str, float]:
    """{submitter: effective priority} from the negotiator."""
    htcondor2 = _binding("htcondor2")

    with condor_errors("cannot read user priorities from the negotiator"):
        location = collector(htcondor2, pool).locate(htcondor2.DaemonType.Negotiator)
        ads = htcondor2.Negotiator(location).getPriorities()
    prios: dict[str, float] = {}
    for ad in ads:
        values = plain(ad)
        name, prio = values.get("Name"), values.get("Priority")
        if (
            isinstance(name, str)
            and isinstance(prio, (int, float))
            and not values.get("IsAccountingGroup")
        ):
            prios[name] = float(prio)
    return prios


def idle_cpus_by_owner(pool: str | None = None) -> dict[str, int]:
    """CPUs requested by idle jobs, per submitter, over every schedd of the pool."""
    htcondor2 = _binding("htcondor2")

    demand: dict[str, int] = {}
    idle = f"JobStatus == {JobStatus.IDLE.value}"
    projection = ["Owner", "User", "AccountingGroup", "RequestCpus"]
    with condor_errors("cannot query the schedds"):
        for values in _job_ads(htcondor2, pool, idle, projection):
            owner = values.get("AccountingGroup") or values.get("User") or values.get("Owner")
            cpus = values.get("RequestCpus")
            if isinstance(owner, str):
                demand[owner] = demand.get(owner, 0) + (
                    int(cpus) if isinstance(cpus, (int, float)) else 1
                )
    return demand


def _job_ads(
    htcondor2: Any, pool: str | None, constraint: str, projection: list[str]
) -> Iterator[dict[str, Any]]:
    """The job ads (plain values) of every schedd of the pool that ``constraint`` selects."""
    for each in schedds(htcondor2, pool):
        for ad in each.query(constraint=constraint, projection=projection):
            yield plain(ad)


def hard_kill(pilot: Pilot, method: KillMethod, pool: str | None = None) -> None:
    """Hard-kill a pilot (Sfiligoi 2013, "Terminating the victim pilot": the hard kill)."""
    classads = _classads()
    htcondor2 = _binding("htcondor2")

    with condor_errors(f"cannot hard-kill {pilot.slot}"):
        if method is KillMethod.VACATE:
            if pilot.address is None:
                raise CondorError(f"{pilot.slot}: no startd address in its slot ad")
            location = classads.machine_ad(pilot.address)
            htcondor2.Startd(location).vacateSlot(pilot.slot, htcondor2.VacateType.Fast)
            return
        gjid = (pilot.global_job_id or "").split("#")
        if len(gjid) != 3:
            raise CondorError(f"{pilot.slot}: no GlobalJobId, cannot find the job's schedd")
        schedd(htcondor2, pool, gjid[0]).act(
            htcondor2.JobAction.Remove, gjid[1], reason="glidein-ext: pilot past its deadline"
        )


def request_vacate(pilot: Pilot, deadline: int | None, pool: str | None = None) -> str:
    """Ask a pilot to leave through its job ad (site/requests.py): set GlideinExtVacateDesired
    (and GlideinExtPayloadDeadline) at its schedd, which must let this user edit the job (its
    owner or a queue super user).  Returns "schedd job" for the record."""
    htcondor2 = _binding("htcondor2")
    parsed = parse_global_job_id(pilot.global_job_id or "")
    if parsed is None:
        raise CondorError(f"{pilot.slot}: no GlobalJobId in its slot ad; cannot find its job")
    schedd_name, cluster, proc = parsed
    job = f"{cluster}.{proc}"
    with condor_errors(f"cannot edit job {job} at schedd {schedd_name}"):
        queue = schedd(htcondor2, pool, schedd_name)
        edited = 0
        for attr, value in qedit_values(True, deadline):
            edited = queue.edit(job, attr, value)
    if not edited:
        raise CondorError(f"{pilot.slot}: job {job} is not in the queue of {schedd_name}")
    return f"schedd {schedd_name} job {job}"


def query_job_requests(pool: str | None = None) -> dict[str, SiteRequest]:
    """{GlobalJobId: request} of every job ad in the pool's schedds that carries one."""
    htcondor2 = _binding("htcondor2")

    requests: dict[str, SiteRequest] = {}
    asked = f"{VACATE_ATTR} =!= undefined"
    projection = ["GlobalJobId", VACATE_ATTR, DEADLINE_ATTR]
    with condor_errors("cannot query the schedds for vacate requests"):
        for values in _job_ads(htcondor2, pool, asked, projection):
            gjid = values.get("GlobalJobId")
            request = request_from_values(values.get(VACATE_ATTR), values.get(DEADLINE_ATTR))
            if isinstance(gjid, str) and request is not None:
                requests[gjid] = request
    return requests
