"""One refresh of the glidein's side of the handshake: read every input, write `.pilot.ad`.

Used by the startd cron (every period: the heartbeat), by the job hooks (at once on job start and
exit) and by the wrapper (before the daemons start, and when `.site.ad` changes).  Errors in one
input do not stop the others: they are collected and reported, and `.pilot.ad` is still written
whenever the glidein's own state can be read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from glidein_ext.adfile import AdValue, read_ad, write_ad
from glidein_ext.errors import AdFileError, AdFileMissing, GlideinExtError
from glidein_ext.glidein import jobtable
from glidein_ext.glidein.cacheneed import read_cache_need
from glidein_ext.glidein.info import GlideinInfo, load_info
from glidein_ext.glidein.mjf import read_features
from glidein_ext.glidein.pilotad import (
    PILOT_AD_FILE,
    PILOT_AD_SCHEMA,
    PilotAdInputs,
    compute_pilot_ad,
)
from glidein_ext.glidein.sitead import (
    NO_ORDER,
    SITE_AD_FILE,
    SITE_AD_SCHEMA,
    DrainOrder,
    drain_order,
)
from glidein_ext.procs import is_alive


@dataclass
class Refresh:
    """What one refresh found and did."""

    now: int
    order: DrainOrder = NO_ORDER
    info: GlideinInfo | None = None
    site_ad: dict[str, AdValue] | None = None
    pilot_ad: dict[str, AdValue] | None = None
    running_jobs: int | None = None
    written: bool = False
    errors: list[str] = field(default_factory=list)


def read_site_ad(start_dir: str) -> dict[str, AdValue] | None:
    """The site's request, or None if there is no `.site.ad`; AdFileError if it is bad."""
    try:
        return read_ad(os.path.join(start_dir, SITE_AD_FILE), SITE_AD_SCHEMA)
    except AdFileMissing:
        return None


def current_order(
    start_dir: str, now: int, env: Mapping[str, str], info: GlideinInfo | None, errors: list[str]
) -> tuple[DrainOrder, dict[str, AdValue] | None]:
    """The drain order from `.site.ad`, MJF and the glidein's retire time.

    A `.site.ad` that fails validation is not obeyed (a request we cannot fully read is no request);
    its error is reported.
    """
    site_ad: dict[str, AdValue] | None = None
    try:
        site_ad = read_site_ad(start_dir)
    except AdFileError as exc:
        errors.append(str(exc))
    features = read_features(env)
    errors.extend(features.errors)
    order = drain_order(
        site_ad,
        now,
        machine_shutdown=features.machine_shutdown,
        job_shutdown=features.job_shutdown,
        glidein_retire_time=info.retire_time if info else None,
    )
    return order, site_ad


def refresh(
    start_dir: str,
    now: int,
    env: Mapping[str, str],
    *,
    prune_dead_starters: bool = False,
) -> Refresh:
    """Recompute and rewrite `.pilot.ad` (with mtime = ``now``, the heartbeat)."""
    result = Refresh(now=now)
    try:
        result.info = load_info(start_dir)
    except GlideinExtError as exc:
        result.errors.append(str(exc))
    result.order, result.site_ad = current_order(start_dir, now, env, result.info, result.errors)
    if result.info is None:
        return result

    try:
        if prune_dead_starters:
            table = jobtable.update_table(
                start_dir, lambda t: t.pruned(lambda j: is_alive(j.starter_pid, j.starter_ticks))
            )
        else:
            table = jobtable.load_table(start_dir)
    except GlideinExtError as exc:
        result.errors.append(str(exc))
        table = jobtable.JobTable()

    info = result.info
    result.running_jobs = len(table.jobs)
    cache_need, why = read_cache_need(start_dir, now)
    if why:
        result.errors.append(why)
    state = PilotAdInputs(
        cpus=info.cpus,
        start_time=info.start_time,
        jobs=table.running(),
        last_job_start=table.last_job_start,
        draining=result.order.retire,
        priority_factor=info.priority_factor,
        cached_input_needed_mb=cache_need,
    )
    result.pilot_ad = compute_pilot_ad(state, now)
    try:
        write_ad(
            os.path.join(start_dir, PILOT_AD_FILE), result.pilot_ad, PILOT_AD_SCHEMA, mtime=now
        )
        result.written = True
    except GlideinExtError as exc:
        result.errors.append(str(exc))
    return result
