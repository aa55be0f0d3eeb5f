"""The one boundary over HTCondor for the site tools (htcondor2, classad2).

Queries the collector for pilot slots and the negotiator for user priorities, reads
``condor_status -long`` files, and hard-kills a pilot.  Every HTCondor error becomes a
CondorError here.  htcondor2 is imported inside the functions: nothing happens at import, and
`site propagate` (the cron) never loads it.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from glidein_ext.condor import JobStatus, condor_errors
from glidein_ext.errors import CondorError, UsageError
from glidein_ext.site import attrs
from glidein_ext.site.pilots import Pilot, pilot_from_ad

# A pilot slot: our site cron's heartbeat or error attributes, or any of the seed's PILOT_* values
# (published by the seed's prototype or another site's cron, without our heartbeat attributes).
PILOT_CONSTRAINT = " || ".join(
    f"{name} =!= undefined" for name in (attrs.HEARTBEAT_TIME, attrs.AD_ERROR, *attrs.PILOT_ATTRS)
)


class KillMethod(Enum):
    """How the site hard-kills a pilot (site policy)."""

    VACATE = "vacate"  # the startd evicts the job fast (condor_vacate -fast): the site's own tool
    REMOVE = "remove"  # the job's schedd removes it (condor_rm): for a site that owns the CE


def plain(ad: Any) -> dict[str, Any]:
    """A classad2 ad as plain Python values (expressions that do not evaluate become None)."""
    import classad2

    out: dict[str, Any] = {}
    for key in ad:
        try:
            value = ad.eval(key)
        except (classad2.ClassAdException, ValueError, TypeError, RuntimeError):
            value = None  # an expression that does not evaluate to a value
        out[key] = value if isinstance(value, (bool, int, float, str)) else None
    return out


def _collector(pool: str | None) -> Any:
    import htcondor2

    return htcondor2.Collector(pool) if pool else htcondor2.Collector()


def query_slot_ads(
    pool: str | None = None, constraint: str = PILOT_CONSTRAINT
) -> list[dict[str, Any]]:
    """Slot ads (plain values) from the collector."""
    import htcondor2

    with condor_errors(f"cannot query the collector {pool or '(default)'}"):
        ads = _collector(pool).query(htcondor2.AdType.Startd, constraint=constraint)
    return [plain(ad) for ad in ads]


def local_execute_dir() -> str | None:
    """This machine's startd EXECUTE directory from the local HTCondor configuration, if any."""
    import htcondor2

    with condor_errors("cannot read the local HTCondor configuration (EXECUTE)"):
        execute = htcondor2.param.get("EXECUTE")
    return execute if isinstance(execute, str) and execute else None


def query_pilots(pool: str | None = None) -> list[Pilot]:
    return [p for p in (pilot_from_ad(ad) for ad in query_slot_ads(pool)) if p is not None]


def parse_slot_ads(text: str, source: str) -> list[dict[str, Any]]:
    """Slot ads in ``condor_status -long`` format (blank-line separated old ClassAds)."""
    import classad2

    try:
        ads = list(classad2.parseAds(text, classad2.ParserType.Old))
    except (classad2.ClassAdException, ValueError, TypeError, RuntimeError) as exc:
        raise UsageError(f"{source}: not condor_status -long output: {exc}") from exc
    return [plain(ad) for ad in ads]


def pilots_from_file(path: str) -> list[Pilot]:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from exc
    return [p for p in (pilot_from_ad(ad) for ad in parse_slot_ads(text, path)) if p is not None]


def user_priorities(pool: str | None = None) -> dict[str, float]:
    """{submitter: effective priority} from the negotiator."""
    import htcondor2

    with condor_errors("cannot read user priorities from the negotiator"):
        location = _collector(pool).locate(htcondor2.DaemonType.Negotiator)
        ads = htcondor2.Negotiator(location).getPriorities()
    prios: dict[str, float] = {}
    for ad in ads:
        values = plain(ad)
        name, prio = values.get("Name"), values.get("Priority")
        if (
            isinstance(name, str)
            and isinstance(prio, int | float)
            and not values.get("IsAccountingGroup")
        ):
            prios[name] = float(prio)
    return prios


def idle_cpus_by_owner(pool: str | None = None) -> dict[str, int]:
    """CPUs requested by idle jobs, per submitter, over every schedd of the pool."""
    import htcondor2

    demand: dict[str, int] = {}
    with condor_errors("cannot query the schedds"):
        for location in _collector(pool).locateAll(htcondor2.DaemonType.Schedd):
            for ad in htcondor2.Schedd(location).query(
                constraint=f"JobStatus == {JobStatus.IDLE.value}",
                projection=["Owner", "User", "AccountingGroup", "RequestCpus"],
            ):
                values = plain(ad)
                owner = values.get("AccountingGroup") or values.get("User") or values.get("Owner")
                cpus = values.get("RequestCpus")
                if isinstance(owner, str):
                    demand[owner] = demand.get(owner, 0) + (
                        int(cpus) if isinstance(cpus, (int, float)) else 1
                    )
    return demand


def hard_kill(pilot: Pilot, method: KillMethod, pool: str | None = None) -> None:
    """Hard-kill a pilot (seed 003, "Terminating the victim pilot": the hard kill)."""
    import classad2
    import htcondor2

    with condor_errors(f"cannot hard-kill {pilot.slot}"):
        if method is KillMethod.VACATE:
            if pilot.address is None:
                raise CondorError(f"{pilot.slot}: no startd address in its slot ad")
            location = classad2.ClassAd({"MyAddress": pilot.address, "MyType": "Machine"})
            htcondor2.Startd(location).vacateSlot(pilot.slot, htcondor2.VacateType.Fast)
            return
        gjid = (pilot.global_job_id or "").split("#")
        if len(gjid) != 3:
            raise CondorError(f"{pilot.slot}: no GlobalJobId, cannot find the job's schedd")
        location = _collector(pool).locate(htcondor2.DaemonType.Schedd, gjid[0])
        htcondor2.Schedd(location).act(
            htcondor2.JobAction.Remove, gjid[1], reason="glidein-ext: pilot past its deadline"
        )
