"""The handshake demo: Sfiligoi 2013's graceful drain, narrated, in the real HTCondor pool.

A glidein (our wrapper, its own condor_master, one partitionable slot of 4 CPUs) joins the chroot
pool; two user jobs of different lengths run; the site writes `.site.ad`; the glidein stops taking
jobs within seconds, lets its jobs finish, and leaves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from glidein_ext.adfile import read_ad_with_stat
from glidein_ext.condor import JobStatus
from glidein_ext.glidein.pilotad import PILOT_AD_FILE, PILOT_AD_SCHEMA
from glidein_ext.glidein.render import describe_pilot_ad
from glidein_ext.sandbox.pool import CondorSandbox, Glidein, wait_for
from glidein_ext.sandbox.site import VoJob, vo_job_submit

RUNNING, IDLE, COMPLETED = JobStatus.RUNNING, JobStatus.IDLE, JobStatus.COMPLETED


def _submit(
    box: CondorSandbox, glidein: Glidein, tag: str, rows: list[tuple[int, int, int]]
) -> int:
    jobs = [VoJob(seconds, cpus, estimate) for seconds, cpus, estimate in rows]
    text = vo_job_submit(tag, glidein.name, jobs, tag_attribute="GlideinExtDemo", max_wall_min=30)
    return box.submit(glidein.start_dir, tag, text)


def _jobs(box: CondorSandbox, tag: str) -> list[dict[str, Any]]:
    return box.queue(f'GlideinExtDemo == "{tag}"')


def run_handshake_demo(say: Callable[[str], None], keep_pool: bool = False) -> None:
    """Run the demo end to end; raises GlideinExtError if HTCondor does not do what it should."""
    box = CondorSandbox()
    say("1. Starting a real HTCondor pool (Debian trixie's HTCondor in a chroot, built once).")
    started = box.stopped()
    box.start()
    glidein: Glidein | None = None
    try:
        say("2. Starting a glidein with `glidein-ext wrapper`: 4 CPUs, one partitionable slot.")
        say("   The wrapper writes .pilot.ad (USED_FRACTION1k = 0) before condor_master starts.")
        glidein = box.start_glidein("demo", 4, cron_period=10)
        for ad in box.status(f'GLIDEIN_ExtName == "{glidein.name}"'):
            say(
                f"   condor_status: {ad['Name']}  Cpus={ad['Cpus']}  "
                f"GLIDEIN_RetireNow={ad['GLIDEIN_RetireNow']}"
            )

        tag = f"{glidein.name}-work"
        say(
            "3. Submitting two user jobs: 2 CPUs for 40 s (estimate 1 min), 1 CPU for 70 s (2 min)."
        )
        _submit(box, glidein, tag, [(40, 2, 1), (70, 1, 2)])
        wait_for(
            lambda: (j := _jobs(box, tag)) and all(x["JobStatus"] == RUNNING for x in j),
            120,
            "both jobs running",
        )
        time.sleep(2)
        values, st = read_ad_with_stat(str(glidein.host_dir / PILOT_AD_FILE), PILOT_AD_SCHEMA)
        say("   The job hooks updated .pilot.ad at once:")
        say(
            describe_pilot_ad(
                f"{glidein.start_dir}/.pilot.ad", values, int(st.st_mtime), int(time.time())
            )
        )

        say("4. The site asks the pilot to leave: `glidein-ext site-ad write DIR --vacate`.")
        asked = time.monotonic()
        box.run("glidein-ext", "site-ad", "write", glidein.start_dir, "--vacate")
        wait_for(
            lambda: any(
                a.get("GLIDEIN_RetireNow")
                for a in box.status(f'GLIDEIN_ExtName == "{glidein.name}"')
            ),
            30,
            "GLIDEIN_RetireNow = true",
            interval=0.5,
        )
        say(
            f"   condor_status: GLIDEIN_RetireNow = true after {time.monotonic() - asked:.1f} s"
            " (the wrapper saw .site.ad change and made HTCondor re-run the cron)."
        )
        values, _ = read_ad_with_stat(str(glidein.host_dir / PILOT_AD_FILE), PILOT_AD_SCHEMA)
        say(f"   .pilot.ad: CAN_POSTPONE_LAST_JOB = {str(values['CAN_POSTPONE_LAST_JOB']).lower()}")

        late = f"{glidein.name}-late"
        say("5. A new job for this glidein is submitted; START refuses it while retiring.")
        _submit(box, glidein, late, [(5, 1, 1)])
        time.sleep(12)
        states = [j["JobStatus"] for j in _jobs(box, late)]
        say(f"   after 12 s the new job is {'idle' if states == [IDLE] else states}.")

        say("6. The running jobs finish normally; then the glidein's daemons exit by themselves.")
        status = glidein.wait(timeout=180)
        done = box.history(f'GlideinExtDemo == "{tag}"')
        for job in sorted(done, key=lambda j: j["ProcId"]):
            say(
                f"   job {job['ClusterId']}.{job['ProcId']}: completed, exit {job['ExitCode']}, "
                f"started {job.get('NumJobStarts', 1)} time(s)"
            )
        say(f"   glidein-ext wrapper exited with status {status}.")
        box.remove(f'GlideinExtDemo == "{late}"')
        say(
            "Done: the pilot told the site what it was doing, obeyed the site's request, wasted "
            "no user work, and left."
        )
    finally:
        if glidein is not None:
            glidein.stop()
        if not keep_pool and started:
            box.stop(started)  # only the pools this demo started: others' stay up
