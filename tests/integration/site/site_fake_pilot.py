"""A small HTCondor job that acts as a pilot for the site tests (run by the chroot's python3).

It writes `.pilot.ad` in its sandbox (the job's start-up directory) like a glidein does, with the
values given on the command line, refreshing it (the heartbeat) every second unless told not to,
and reads `.site.ad` with the project's own pilot-side code: when asked to vacate it drains
(CAN_POSTPONE_LAST_JOB = false) and leaves a few seconds later, unless it is told to ignore the
request (a pilot that will have to be hard-killed).

usage: site_fake_pilot.py USED1K WASTE1K EXP_END_IN PRIORITY obey|ignore heartbeat|frozen LIFETIME
"""

from __future__ import annotations

import os
import sys
import time

from glidein_ext.adfile import read_ad, write_ad
from glidein_ext.errors import AdFileError
from glidein_ext.glidein.pilotad import PILOT_AD_FILE, PILOT_AD_SCHEMA
from glidein_ext.glidein.sitead import SITE_AD_FILE, SITE_AD_SCHEMA, drain_order

DRAIN_SECONDS = 20


def main(argv: list[str]) -> int:
    used, waste, exp_in, priority = (int(a) for a in argv[:4])
    obey, heartbeat, lifetime = argv[4] == "obey", argv[5] == "heartbeat", int(argv[6])
    here = os.getcwd()
    start = int(time.time())
    exp_end = start + exp_in
    draining_since: int | None = None
    written = False
    while time.time() < start + lifetime:
        now = int(time.time())
        try:
            site = read_ad(os.path.join(here, SITE_AD_FILE), SITE_AD_SCHEMA)
        except AdFileError:
            site = None
        if obey and draining_since is None and drain_order(site, now).retire:
            draining_since = now
        if heartbeat or not written:
            values = {
                "LAST_JOB_START": start,
                "FIRST_EXP_JOB_END": exp_end,
                "LAST_EXP_JOB_END": exp_end,
                "LAST_MAX_JOB_END": exp_end + 600,
                "USED_FRACTION1k": used,
                "ADD_UNCOM_TIME1k": 100,
                "ADD_FINAL_EXP_WASTE1k": waste,
                "PRIORITY_FACTOR": priority,
                "CAN_POSTPONE_LAST_JOB": draining_since is None,
            }
            write_ad(os.path.join(here, PILOT_AD_FILE), values, PILOT_AD_SCHEMA)
            written = True
        if draining_since is not None and now >= draining_since + DRAIN_SECONDS:
            return 0
        time.sleep(1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
