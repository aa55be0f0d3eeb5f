"""Setting a glidein up before its HTCondor daemons start (Sfiligoi 2013, "Information Advertising":
the wrapper sets USED_FRACTION1k = 0 before the daemons start).

Shared by ``glidein-ext wrapper`` and by ``glidein-ext init``, which the glideinWMS custom script
``scripts/glidein-ext-setup.sh`` runs when glideinWMS's own condor_startup.sh starts the daemons.
"""

from __future__ import annotations

from collections.abc import Mapping

from glidein_ext.glidein import jobtable
from glidein_ext.glidein.info import GlideinInfo, ensure_state_dir, save_info
from glidein_ext.glidein.refresh import Refresh, refresh


def init_glidein(start_dir: str, info: GlideinInfo, now: int, env: Mapping[str, str]) -> Refresh:
    """Write glidein.json, reset the job table and write the first `.pilot.ad`."""
    ensure_state_dir(start_dir)
    save_info(start_dir, info)
    # A (re)starting glidein runs no job yet.
    jobtable.update_table(start_dir, lambda t: jobtable.JobTable())
    return refresh(start_dir, now, env)
