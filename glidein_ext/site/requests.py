"""The site's request through the pilot's job ad (Sfiligoi 2013, "Requesting pilot termination" and
"The semi-automatic solution", without condor_ssh_to_job).

A site controller or admin that is not on the pilot's execute node cannot write ``.site.ad`` into
the pilot's sandbox itself.  The seed reaches the start-up dir with ``condor_ssh_to_job``; that
needs sshd and ssh-keygen on every node and the job's owner's permission, and many sites (and
this project's sandbox) cannot do it.  HTCondor already has a channel from the schedd to the
site's own code on the node: the job ad.  So:

1. the controller (anywhere with write access to the site schedd, e.g. a queue super user) sets
   ``GlideinExtVacateDesired = true`` and ``GlideinExtPayloadDeadline = <unix time>`` in the
   pilot's job ad (``condor_qedit``; :func:`glidein_ext.site.pool.request_vacate`);
2. the site cron on each execute node (`site propagate`) asks the schedds of its running pilots
   for those two attributes (one ``condor_q`` per schedd per run, only when pilots run there) and
   writes the request into each pilot's ``.site.ad`` with the same atomic writer, whenever it
   differs from what the file says; the pilot obeys ``.site.ad`` as always;
3. the cron publishes ``SITE_VACATE_DESIRED`` / ``SITE_PAYLOAD_DEADLINE`` from ``.site.ad`` as
   before, and a restarted controller also reads the job ads, so nothing is asked twice.

Only ``true``/``false`` and integer literals are taken from the job ad (a pilot's owner can edit
its own job ad: at worst it drains itself); the GlobalJobId that ties a sandbox to its job comes
from the starter's ``.job.ad``, so a job that forges it only hides its own request (the controller
then hard-kills it after the deadline).  The job ad's request wins over a ``.site.ad`` written on
the node by hand.  :func:`plan_writes` and the parsers are pure; :func:`apply_job_ad_requests` does
the I/O.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from glidein_ext.adfile import AdValue, read_ad
from glidein_ext.errors import AdFileError, AdFileMissing
from glidein_ext.glidein.sitead import (
    PAYLOAD_DEADLINE,
    SITE_AD_FILE,
    SITE_AD_SCHEMA,
    VACATE_DESIRED,
)
from glidein_ext.glidein.siteadwrite import site_ad_values, write_site_ad
from glidein_ext.site.publish import CronRun, SandboxReading
from glidein_ext.site.sandboxes import parse_global_job_id

VACATE_ATTR = "GlideinExtVacateDesired"
DEADLINE_ATTR = "GlideinExtPayloadDeadline"
QUERY_TIMEOUT = 10.0
MAX_QUERY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class SiteRequest:
    """What the job ad asks: drain (or cancel), and by when."""

    vacate: bool
    deadline: int | None = None

    def site_ad(self) -> dict[str, AdValue]:
        """The `.site.ad` values that say the same."""
        return site_ad_values(self.vacate, self.deadline)


def qedit_values(vacate: bool, deadline: int | None) -> list[tuple[str, str]]:
    """(attribute, ClassAd literal) pairs the controller sets in the job ad (pure)."""
    edits = [(VACATE_ATTR, "true" if vacate else "false")]
    edits.append((DEADLINE_ATTR, str(deadline) if vacate and deadline is not None else "undefined"))
    return edits


def request_from_values(vacate: Any, deadline: Any) -> SiteRequest | None:
    """A request from job-ad values (plain Python), or None when there is none or it is not a
    literal of the right type."""
    if not isinstance(vacate, bool):
        return None
    if isinstance(deadline, bool) or not isinstance(deadline, int) or deadline <= 0:
        deadline = None
    return SiteRequest(vacate, deadline if vacate else None)


def query_command(schedd: str, job_ids: Sequence[str], condor_q: str = "condor_q") -> list[str]:
    """The condor_q argv that fetches the request attributes of ``job_ids`` (argv, no shell)."""
    attrs = ",".join(("GlobalJobId", VACATE_ATTR, DEADLINE_ATTR))
    return [condor_q, "-name", schedd, "-allusers", "-attributes", attrs, "-json", *job_ids]


def parse_query(text: str) -> dict[str, SiteRequest]:
    """{GlobalJobId: request} from ``condor_q -json`` output; ValueError if it is not JSON."""
    text = text.strip()
    if not text:
        return {}  # condor_q prints nothing when no job matched
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("not a JSON list of job ads")
    out: dict[str, SiteRequest] = {}
    for ad in data:
        if not isinstance(ad, dict):
            continue
        gjid = ad.get("GlobalJobId")
        request = request_from_values(ad.get(VACATE_ATTR), ad.get(DEADLINE_ATTR))
        if isinstance(gjid, str) and request is not None:
            out[gjid] = request
    return out


def jobs_by_schedd(readings: Sequence[SandboxReading]) -> dict[str, list[str]]:
    """{schedd: [cluster.proc, ...]} of the running pilots (sandboxes with a .pilot.ad)."""
    out: dict[str, list[str]] = {}
    for reading in readings:
        if reading.pilot_ad is None or reading.global_job_id is None:
            continue
        parsed = parse_global_job_id(reading.global_job_id)
        if parsed is not None:
            schedd, cluster, proc = parsed
            out.setdefault(schedd, []).append(f"{cluster}.{proc}")
    return out


def plan_writes(
    readings: Sequence[SandboxReading], requests: Mapping[str, SiteRequest]
) -> list[tuple[SandboxReading, SiteRequest]]:
    """The sandboxes whose `.site.ad` must change to carry their job ad's request (pure)."""
    writes = []
    for reading in readings:
        if reading.pilot_ad is None or reading.global_job_id is None:
            continue
        request = requests.get(reading.global_job_id)
        if request is None:
            continue
        current = dict(reading.site_ad or {})
        wanted = request.site_ad()
        if {k: current.get(k) for k in (VACATE_DESIRED, PAYLOAD_DEADLINE)} != {
            k: wanted.get(k) for k in (VACATE_DESIRED, PAYLOAD_DEADLINE)
        }:
            writes.append((reading, request))
    return writes


Runner = Callable[[Sequence[str], float], str]


def run_query(argv: Sequence[str], timeout: float) -> str:
    """Run a condor_q; its stdout.  OSError/TimeoutExpired/CalledProcessError propagate."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise subprocess.CalledProcessError(proc.returncode, argv[0], lines[-1] if lines else "")
    return proc.stdout[:MAX_QUERY_BYTES]


def fetch_requests(
    readings: Sequence[SandboxReading],
    runner: Runner = run_query,
    timeout: float = QUERY_TIMEOUT,
    condor_q: str = "condor_q",
) -> tuple[dict[str, SiteRequest], list[str]]:
    """Ask each schedd of the running pilots for their requests; (requests, errors)."""
    requests: dict[str, SiteRequest] = {}
    errors: list[str] = []
    for schedd, job_ids in sorted(jobs_by_schedd(readings).items()):
        try:
            requests.update(parse_query(runner(query_command(schedd, job_ids, condor_q), timeout)))
        except subprocess.CalledProcessError as exc:
            errors.append(f"condor_q -name {schedd}: {exc.output or exc.returncode}")
        except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
            errors.append(f"condor_q -name {schedd}: {exc}")
    return requests, errors


def _reread(reading: SandboxReading) -> SandboxReading:
    try:
        values = read_ad(f"{reading.sandbox}/{SITE_AD_FILE}", SITE_AD_SCHEMA)
    except AdFileMissing:
        return replace(reading, site_ad=None)
    except AdFileError as exc:
        return replace(reading, error="; ".join(e for e in (reading.error, str(exc)) if e))
    return replace(reading, site_ad=values)


def apply_job_ad_requests(
    run: CronRun,
    runner: Runner = run_query,
    timeout: float = QUERY_TIMEOUT,
    condor_q: str = "condor_q",
) -> CronRun:
    """Fetch the job-ad requests of this node's pilots, write them into their `.site.ad`, and
    return the run with the sandboxes' `.site.ad` as they now are (and any errors)."""
    requests, errors = fetch_requests(run.readings, runner, timeout, condor_q)
    changed: dict[str, SandboxReading] = {}
    for reading, request in plan_writes(run.readings, requests):
        try:
            write_site_ad(reading.sandbox, vacate=request.vacate, deadline=request.deadline)
        except AdFileError as exc:
            errors.append(f"{reading.slot}: {exc}")
            continue
        changed[reading.sandbox] = _reread(reading)
    readings = tuple(changed.get(r.sandbox, r) for r in run.readings)
    return CronRun(run.now, run.stale_after, readings, (*run.errors, *errors))
