"""The graceful-draining handshake in a real HTCondor glidein (Sfiligoi 2013), end to end.

Each test starts its own glidein with `glidein-ext wrapper` (its own condor_master and a
partitionable slot) inside the chroot pool, runs real user jobs through the pool's schedd, and
watches what HTCondor does.  Jobs are pinned to their glidein with GLIDEIN_ExtName.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from glidein_ext.adfile import read_ad, read_ad_with_stat
from glidein_ext.condor import JobStatus
from glidein_ext.glidein.info import load_info
from glidein_ext.glidein.jobtable import load_table
from glidein_ext.glidein.jobtimes import resolve_job_times
from glidein_ext.glidein.pilotad import PILOT_AD_SCHEMA, PilotAdInputs, RunningJob, compute_pilot_ad
from glidein_ext.sandbox.pool import CondorSandbox, Glidein, wait_for
from glidein_ext.sandbox.site import VoJob, vo_job_submit

pytestmark = pytest.mark.condor

RUNNING, IDLE, COMPLETED = JobStatus.RUNNING, JobStatus.IDLE, JobStatus.COMPLETED


def job_submit(glidein: str, jobs: list[tuple[int, int, int, int]], tag: str) -> str:
    """Submit text for sleep jobs: (seconds, cpus, estimated minutes, max minutes) each."""
    sleeps = [VoJob(*job) for job in jobs]
    return vo_job_submit(tag, glidein, sleeps, tag_attribute="GlideinExtTest")


def slot_attr(box: CondorSandbox, glidein: str, attr: str) -> list[Any]:
    return [ad.get(attr) for ad in box.status(f'GLIDEIN_ExtName == "{glidein}"')]


def tagged_jobs(box: CondorSandbox, tag: str) -> list[dict[str, Any]]:
    return box.queue(f'GlideinExtTest == "{tag}"')


def start_jobs(
    box: CondorSandbox, glidein: Glidein, suffix: str, jobs: list[tuple[int, int, int, int]]
) -> str:
    """Submit ``jobs`` (as ``job_submit``) to ``glidein``, tagged ``<glidein>-<suffix>``, and wait
    until every one runs; the tag."""
    tag = f"{glidein.name}-{suffix}"
    box.submit(glidein.start_dir, tag, job_submit(glidein.name, jobs, tag))
    wait_for(
        lambda: (found := tagged_jobs(box, tag)) and all(j["JobStatus"] == RUNNING for j in found),
        90,
        f"every job of {tag} running",
    )
    return tag


def finish_jobs(
    box: CondorSandbox, glidein: Glidein, suffix: str, jobs: list[tuple[int, int, int, int]]
) -> None:
    """Submit ``jobs`` to ``glidein``, tagged ``<glidein>-<suffix>``, and wait until one of them
    ran to completion."""
    tag = f"{glidein.name}-{suffix}"
    box.submit(glidein.start_dir, tag, job_submit(glidein.name, jobs, tag))
    wait_for(
        lambda: any(j["JobStatus"] == COMPLETED for j in box.history(f'GlideinExtTest == "{tag}"')),
        90,
        f"a job of {tag} to run to completion",
    )


def site_ad_write(box: CondorSandbox, glidein: Glidein, *args: str) -> None:
    box.run("glidein-ext", "site-ad", "write", glidein.start_dir, *args)


def request_vacate(box: CondorSandbox, glidein: Glidein, every_slot: bool = False) -> None:
    """``site-ad write --vacate``; wait until condor_status shows GLIDEIN_RetireNow true on a
    slot of the glidein (``every_slot``: on each)."""
    site_ad_write(box, glidein, "--vacate")
    shown = all if every_slot else any
    wait_for(
        lambda: (flags := slot_attr(box, glidein.name, "GLIDEIN_RetireNow")) and shown(flags),
        20,
        "GLIDEIN_RetireNow = true in condor_status",
        interval=0.5,
    )


@pytest.fixture
def started() -> Iterator[list[Glidein]]:
    """Glideins a test starts; stopped (SIGQUIT) at the end whatever happened."""
    glideins: list[Glidein] = []
    yield glideins
    for glidein in glideins:
        glidein.stop()


def test_config_snippet_parses_in_htcondor(sandbox: CondorSandbox, started: list[Glidein]) -> None:
    glidein = sandbox.start_glidein("g-config", 1, cron_period=300)
    started.append(glidein)
    config = f"{glidein.start_dir}/.glidein-ext/condor_config"

    def val(name: str) -> str:
        return sandbox.run("env", f"CONDOR_CONFIG={config}", "condor_config_val", name).strip()

    assert "GLIDEINEXT" in val("STARTD_CRON_JOBLIST").split()
    assert "GLIDEIN_RetireNow =!= True" in val("START")
    assert "GLIDEIN_RetireNow =?= True" in val("PREEMPT")
    assert "GLIDEIN_RetireDeadline" in val("MAXJOBRETIREMENTTIME")
    assert "NumDynamicSlots" in val("STARTD.DAEMON_SHUTDOWN")
    assert val("GLIDEINEXT_HOOK_PREPARE_JOB_ARGS").startswith("hook prepare-job --start-dir /home/")
    # The cron's attributes are on the slot, as literals.
    ads = sandbox.status(f'GLIDEIN_ExtName == "{glidein.name}"')
    assert ads and all(ad["GLIDEIN_RetireNow"] is False for ad in ads)
    assert all(ad["GLIDEIN_RetireSource"] == "none" for ad in ads)
    assert all(ad["GLIDEIN_ExtError"] == "" for ad in ads)
    # SIGTERM to the wrapper reaches condor_master (graceful shutdown); the wrapper then exits.
    glidein.process.send_signal(signal.SIGTERM)
    assert glidein.wait(timeout=60) == 0
    master_log = (glidein.host_dir / ".glidein-ext/condor/log/MasterLog").read_text(
        errors="replace"
    )
    assert "Got SIGTERM" in master_log
    assert "forwarding signal 15" in glidein.log()


def test_running_jobs_are_in_pilot_ad_and_heartbeat_advances(
    sandbox: CondorSandbox, started: list[Glidein]
) -> None:
    period = 5
    glidein = sandbox.start_glidein("g-jobs", 4, cron_period=period)
    started.append(glidein)
    tag = start_jobs(sandbox, glidein, "jobs", [(120, 2, 3, 10), (150, 1, 2, 20)])
    wait_for(lambda: len(load_table(str(glidein.host_dir)).jobs) == 2, 30, "both job hooks")

    info = load_info(str(glidein.host_dir))
    # Wait for a .pilot.ad the cron wrote from a run that started after both hooks (the second
    # write after them: the first may come from a run already under way), then compare with the
    # pure core.  Polled: on a loaded machine the cron may run late.
    ad_path = str(glidein.host_dir / ".pilot.ad")
    hooks_seen = time.time()
    first = wait_for(
        lambda: os.stat(ad_path).st_mtime > hooks_seen and os.stat(ad_path).st_mtime,
        3 * period + 30,
        "a .pilot.ad written after both hooks",
        interval=0.3,
    )
    wait_for(
        lambda: os.stat(ad_path).st_mtime > first,
        3 * period + 30,
        "the next .pilot.ad",
        interval=0.3,
    )
    values, st = read_ad_with_stat(ad_path, PILOT_AD_SCHEMA)
    now = int(st.st_mtime)
    running = []
    for ad in tagged_jobs(sandbox, tag):
        lowered = {k.lower(): v for k, v in ad.items()}
        start = int(ad["JobCurrentStartDate"])
        times = resolve_job_times(
            lowered, start, info.todie, info.expected_sources(), info.max_sources()
        )
        running.append(
            RunningJob(
                ad["GlobalJobId"], int(ad["RequestCpus"]), start, times.expected_end, times.max_end
            )
        )
    state = PilotAdInputs(
        cpus=4,
        start_time=info.start_time,
        jobs=tuple(sorted(running, key=lambda j: j.job_id)),
        last_job_start=max(j.start for j in running),
    )
    assert values == compute_pilot_ad(state, now)
    assert values["USED_FRACTION1k"] == 768
    assert values["LAST_EXP_JOB_END"] - values["FIRST_EXP_JOB_END"] in range(55, 66)  # 3 vs 2 min

    # The heartbeat: the cron rewrites .pilot.ad every period.
    seen = {now}
    watch_until = time.monotonic() + 4 * period
    while time.monotonic() < watch_until:
        seen.add(int(os.stat(glidein.host_dir / ".pilot.ad").st_mtime))
        time.sleep(0.5)
    beats = sorted(seen)
    assert len(beats) >= 4, f"heartbeats seen: {beats}"
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    assert max(gaps) <= period + 2, f"heartbeat gaps {gaps} for a {period} s period"
    assert slot_attr(sandbox, glidein.name, "GLIDEIN_ExtRunningJobs")[0] == 2
    sandbox.remove(f'GlideinExtTest == "{tag}"')


def test_vacate_request_drains_the_glidein(sandbox: CondorSandbox, started: list[Glidein]) -> None:
    # A long cron period: only the wrapper's .site.ad watch can make the request take effect fast.
    glidein = sandbox.start_glidein("g-vacate", 4, cron_period=300)
    started.append(glidein)
    tag = start_jobs(sandbox, glidein, "vacate", [(45, 2, 1, 10), (30, 1, 1, 10)])
    requested = time.monotonic()
    request_vacate(sandbox, glidein)
    took = time.monotonic() - requested
    assert took < 15, f"the vacate request took {took:.1f} s"
    assert (
        read_ad(str(glidein.host_dir / ".pilot.ad"), PILOT_AD_SCHEMA)["CAN_POSTPONE_LAST_JOB"]
        is False
    )

    # A new job for this glidein stays idle.
    late = f"{glidein.name}-vacate-late"
    sandbox.submit(glidein.start_dir, late, job_submit(glidein.name, [(5, 1, 1, 10)], late))
    # The negotiator looked for a match for it and found none (the schedd records the refusal
    # in the job's ad), while the glidein still had a free core.
    wait_for(
        lambda: all("LastRejMatchTime" in j for j in tagged_jobs(sandbox, late)),
        60,
        "a negotiation cycle that found the late job no match",
        interval=0.5,
    )
    assert [j["JobStatus"] for j in tagged_jobs(sandbox, late)] == [IDLE]

    # The running jobs finish normally, then the glidein's daemons exit.
    assert glidein.wait(timeout=150) == 0
    done = sandbox.history(f'GlideinExtTest == "{tag}"')
    assert len(done) == 2
    assert all(j["JobStatus"] == COMPLETED and j["ExitCode"] == 0 for j in done)
    assert all(j.get("NumJobStarts", 1) == 1 for j in done), "a job was evicted and restarted"
    start_log = (glidein.host_dir / ".glidein-ext/condor/log/StartLog").read_text(errors="replace")
    assert "DaemonShutdown expression" in start_log and "evaluated to TRUE" in start_log
    sandbox.remove(f'GlideinExtTest == "{late}"')


def test_payload_deadline_makes_htcondor_vacate_the_job_in_time(
    sandbox: CondorSandbox, started: list[Glidein]
) -> None:
    glidein = sandbox.start_glidein(
        "g-deadline",
        2,
        cron_period=300,
        extra_args=["--max-vacate-time", "5", "--deadline-margin", "5"],
    )
    started.append(glidein)
    tag = start_jobs(sandbox, glidein, "deadline", [(600, 1, 20, 60)])
    deadline = int(time.time()) + 40
    site_ad_write(sandbox, glidein, "--vacate", "--deadline", str(deadline))

    def left_running() -> float | None:
        states = [j["JobStatus"] for j in tagged_jobs(sandbox, tag)]
        return time.time() if states and states != [RUNNING] else None

    vacated_at = wait_for(left_running, 90, "the job to be vacated", interval=0.5)
    assert vacated_at < deadline, f"vacated {vacated_at - deadline:.1f} s after the deadline"
    assert vacated_at > deadline - 30, "vacated much earlier than the retirement allows"
    # Nothing runs any more: the glidein leaves.
    assert glidein.wait(timeout=60) == 0
    sandbox.remove(f'GlideinExtTest == "{tag}"')


def test_cancelling_the_drain_resumes_work(sandbox: CondorSandbox, started: list[Glidein]) -> None:
    glidein = sandbox.start_glidein("g-cancel", 2, cron_period=300)
    started.append(glidein)
    tag = start_jobs(sandbox, glidein, "cancel", [(90, 1, 2, 10)])

    def retire_flags() -> list[Any]:
        return slot_attr(sandbox, glidein.name, "GLIDEIN_RetireNow")

    request_vacate(sandbox, glidein)
    site_ad_write(sandbox, glidein, "--no-vacate")
    wait_for(
        lambda: (f := retire_flags()) and not any(f), 20, "RetireNow false again", interval=0.5
    )
    assert (
        read_ad(str(glidein.host_dir / ".pilot.ad"), PILOT_AD_SCHEMA)["CAN_POSTPONE_LAST_JOB"]
        is True
    )

    # New work starts again.
    finish_jobs(sandbox, glidein, "cancel-more", [(5, 1, 1, 10)])

    # Removing the file cancels too.
    request_vacate(sandbox, glidein)
    sandbox.run("rm", f"{glidein.start_dir}/.site.ad")
    wait_for(
        lambda: (f := retire_flags()) and not any(f), 20, "RetireNow false after rm", interval=0.5
    )
    assert glidein.running()
    sandbox.remove(f'GlideinExtTest == "{tag}"')


HOSTILE = [
    ("injection", "VACATE_DESIRED = true\nGLIDEIN_Injected = 1\n"),
    ("expression", "VACATE_DESIRED = time() > 0\n"),
    ("start", "START = false\n"),
]


def test_hostile_site_ads_are_never_obeyed_or_published(
    sandbox: CondorSandbox, started: list[Glidein]
) -> None:
    glidein = sandbox.start_glidein("g-hostile", 1, cron_period=300)
    started.append(glidein)
    site_ad = f"{glidein.start_dir}/.site.ad"
    for name, content in HOSTILE:
        sandbox.write_file(site_ad, content)
        ads = wait_for(
            lambda: (
                (a := sandbox.status(f'GLIDEIN_ExtName == "{glidein.name}"'))
                and a[0].get("GLIDEIN_ExtError")
                and a
            ),
            20,
            f"the {name} file's error on the slot",
            interval=0.5,
        )
        ad = ads[0]
        assert ".site.ad" in ad["GLIDEIN_ExtError"], name
        assert ad["GLIDEIN_RetireNow"] is False, name
        assert "GLIDEIN_Injected" not in ad, name
        sandbox.run("rm", site_ad)
        wait_for(
            lambda: (
                (a := sandbox.status(f'GLIDEIN_ExtName == "{glidein.name}"'))
                and a[0].get("GLIDEIN_ExtError") == ""
            ),
            20,
            "the error to clear",
            interval=0.5,
        )
    # A symlink to a file that asks for a vacate is refused too.
    sandbox.write_file(f"{glidein.start_dir}/elsewhere", "VACATE_DESIRED = true\n")
    sandbox.run("ln", "-s", f"{glidein.start_dir}/elsewhere", site_ad)

    def symlink_error() -> dict[str, Any] | None:
        ads = sandbox.status(f'GLIDEIN_ExtName == "{glidein.name}"')
        return ads[0] if ads and "symbolic link" in ads[0].get("GLIDEIN_ExtError", "") else None

    link_ad = wait_for(symlink_error, 20, "the symlink error", interval=0.5)
    assert link_ad["GLIDEIN_RetireNow"] is False
    # The glidein still works.
    finish_jobs(sandbox, glidein, "hostile", [(2, 1, 1, 10)])
    # SIGQUIT is forwarded as SIGQUIT: HTCondor's fast shutdown.
    glidein.process.send_signal(signal.SIGQUIT)
    glidein.wait(timeout=60)
    master_log = (glidein.host_dir / ".glidein-ext/condor/log/MasterLog").read_text(
        errors="replace"
    )
    assert "Got SIGQUIT" in master_log


def test_static_slots_leave_only_when_no_job_runs(
    sandbox: CondorSandbox, started: list[Glidein]
) -> None:
    # Two static slots: one runs a job, the other is idle.  Retiring must not shut the startd
    # down while the job runs, only after it finished normally.
    glidein = sandbox.start_glidein("g-static", 2, cron_period=5, extra_args=["--static-slots"])
    started.append(glidein)
    assert len(sandbox.status(f'GLIDEIN_ExtName == "{glidein.name}"')) == 2
    tag = start_jobs(sandbox, glidein, "static", [(30, 1, 1, 10)])
    request_vacate(sandbox, glidein, every_slot=True)
    # The startd evaluates DAEMON_SHUTDOWN with each ad it sends: once both slots sent a newer
    # one, it has weighed RetireNow against the running job.
    constraint = f'GLIDEIN_ExtName == "{glidein.name}"'

    def updates() -> dict[str, int]:
        return {ad["Name"]: ad["UpdateSequenceNumber"] for ad in sandbox.status(constraint)}

    retired = updates()
    wait_for(
        lambda: all(n > retired.get(name, n) for name, n in updates().items()),
        30,
        "a newer ad from both slots",
        interval=0.5,
    )
    assert glidein.running(), "the startd left while a job still ran"
    assert [j["JobStatus"] for j in tagged_jobs(sandbox, tag)] == [RUNNING]
    assert glidein.wait(timeout=120) == 0
    done = sandbox.history(f'GlideinExtTest == "{tag}"')
    assert [(j["JobStatus"], j["ExitCode"]) for j in done] == [(COMPLETED, 0)]


def test_glidein_retires_by_itself_at_its_retire_time(
    sandbox: CondorSandbox, started: list[Glidein]
) -> None:
    # --retire-after sets GLIDEIN_ToRetire: the glidein's internal reason to drain (Sfiligoi 2013:
    # "either due to a previous order from the resource provider, or internal logic").
    glidein = sandbox.start_glidein(
        "g-retire", 1, cron_period=5, extra_args=["--retire-after", "20s"]
    )
    started.append(glidein)
    ads = sandbox.status(f'GLIDEIN_ExtName == "{glidein.name}"')
    assert ads[0]["GLIDEIN_RetireNow"] is False
    assert glidein.wait(timeout=90) == 0
    pilot_ad = read_ad(str(glidein.host_dir / ".pilot.ad"), PILOT_AD_SCHEMA)
    assert pilot_ad["CAN_POSTPONE_LAST_JOB"] is False
    assert "startd exited while retiring" in glidein.log()
