"""The glidein's own job at the site, as the site's HTCondor starter describes it.

A glidein is a job of the site's batch system.  When that is HTCondor, the site's starter hands the
job ``_CONDOR_JOB_AD`` and ``_CONDOR_MACHINE_AD`` (its ``.job.ad`` and ``.machine.ad``).  The
glidein publishes which site job and slot it is in its own slot ads, under glideinWMS's names
(``GLIDEIN_SiteWMS``, ``GLIDEIN_SiteWMS_JobId``, ``GLIDEIN_SiteWMS_Slot``) plus the site job's
``GlobalJobId``, so that the VO pool and the site pool can name the same pilot (Sfiligoi 2013: the
site asks a pilot to leave by its site job; the VO sees its glidein draining).

Only literal strings and integers are taken, and only characters that are safe both in a
condor_config value and in a ClassAd string literal survive.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from glidein_ext.adfile import decode_ad_bytes, read_bounded
from glidein_ext.errors import AdFileError
from glidein_ext.glidein.jobad import Literal, parse_job_ad

MAX_AD_BYTES = 512 * 1024
_UNSAFE = re.compile(r"[^A-Za-z0-9_.@#:+-]")
MAX_VALUE = 200

SITE_WMS = "GLIDEIN_SiteWMS"
SITE_WMS_JOB_ID = "GLIDEIN_SiteWMS_JobId"
SITE_WMS_GLOBAL_JOB_ID = "GLIDEIN_SiteWMS_GlobalJobId"
SITE_WMS_SLOT = "GLIDEIN_SiteWMS_Slot"


def safe_value(text: str) -> str:
    """``text`` with every character outside ``[A-Za-z0-9_.@#:+-]`` replaced, cut short."""
    return _UNSAFE.sub("_", text)[:MAX_VALUE]


def _read_ad(path: str | None) -> dict[str, Literal]:
    if not path:
        return {}
    try:
        data, _ = read_bounded(path, MAX_AD_BYTES)
        return parse_job_ad(decode_ad_bytes(data, path))
    except AdFileError:
        return {}  # not run by an HTCondor starter, or an ad we cannot use: nothing to publish


def batch_identity(
    job_ad: Mapping[str, Literal], machine_ad: Mapping[str, Literal]
) -> dict[str, str]:
    """The attributes that name the glidein's site job and slot (pure; empty when unknown)."""
    out: dict[str, str] = {}
    cluster, proc = job_ad.get("clusterid"), job_ad.get("procid")
    if isinstance(cluster, int) and isinstance(proc, int) and not isinstance(cluster, bool):
        out[SITE_WMS] = "HTCondor"
        out[SITE_WMS_JOB_ID] = f"{cluster}.{proc}"
        gjid = job_ad.get("globaljobid")
        if isinstance(gjid, str) and gjid:
            out[SITE_WMS_GLOBAL_JOB_ID] = safe_value(gjid)
    slot = machine_ad.get("name")
    if out and isinstance(slot, str) and slot:
        out[SITE_WMS_SLOT] = safe_value(slot)
    return out


def read_batch_identity(env: Mapping[str, str]) -> dict[str, str]:
    """:func:`batch_identity` from the ads the site's starter named in ``env``."""
    return batch_identity(
        _read_ad(env.get("_CONDOR_JOB_AD")), _read_ad(env.get("_CONDOR_MACHINE_AD"))
    )
