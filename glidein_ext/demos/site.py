"""The site demo (`glidein-ext demo --site`): Sfiligoi 2013 as a site and a VO run it, narrated.

Two real HTCondor pools: the site's (its schedd and two execute nodes with the site snippet and
its propagate cron) and the VO's (collector, negotiator, schedd).  The VO's factory submits two
glideins to the site's schedd; each runs `glidein-ext wrapper` as a site job and its startd joins
the VO pool; VO jobs run in them; the site admin looks at them (`site status`) and, from the
central manager -- not the execute node -- asks one to leave (`site vacate`: the job-ad path); the
glidein stops taking jobs, lets its job finish, and its site job ends with exit 0.  Then the VO's
Task Queue: a glidein started with `--tq` runs its pilot agent beside HTCondor, and its startd
pulls the workflow's tasks through the FETCH_WORK hook, several at once in its partitionable slot,
beside the VO user's job still running in the other glidein.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from glidein_ext.condor import JobStatus
from glidein_ext.demos.local_site import LocalTaskQueue
from glidein_ext.errors import CondorError
from glidein_ext.sandbox.pool import HOST_CLIENT_ENV, SITE_POOL, VO_POOL, CondorSandbox, wait_for
from glidein_ext.sandbox.site import (
    SiteGlidein,
    SiteNode,
    VoJob,
    site_job,
    start_site_nodes,
    stop_site_nodes,
    submit_glideins,
    submit_vo_jobs,
    wait_glideins_joined,
)

Say = Callable[[str], None]


def _admin(say: Say, *args: str) -> str:
    """Run `glidein-ext ARGS` as the site admin on this host (not an execute node); show it."""
    say(f"   $ glidein-ext {' '.join(args)}")
    proc = subprocess.run(
        [sys.executable, "-m", "glidein_ext", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **HOST_CLIENT_ENV},
    )
    for line in (proc.stdout + proc.stderr).rstrip().splitlines():
        say(f"     {line}")
    return proc.stdout


def _retiring(vo: CondorSandbox, glidein: SiteGlidein) -> bool:
    ads = vo.status(glidein.vo_constraint())
    return bool(ads) and all(a.get("GLIDEIN_RetireNow") is True for a in ads)


def _show_glideins(say: Say, site: CondorSandbox, glideins: list[SiteGlidein]) -> None:
    vo = site.on(VO_POOL)
    for g in glideins:
        job = site_job(site, g) or {}
        owner, host = job.get("AccountingGroup"), job.get("RemoteHost")
        say(f"   site job {g.job_id} (site user {owner}) runs on {host}")
        for ad in vo.status(f"{g.vo_constraint()} && PartitionableSlot =?= true"):
            say(
                f"     VO pool: {ad['Name']}  Cpus={ad['TotalSlotCpus']}  "
                f"GLIDEIN_SiteWMS_JobId={ad.get('GLIDEIN_SiteWMS_JobId')}"
            )


def _start_glideins(say: Say, box: CondorSandbox, nodes: list[SiteNode]) -> list[SiteGlidein]:
    say("3. The VO's factory submits two glideins to the site's schedd: each is a site job")
    say("   running `glidein-ext wrapper --collector 127.0.0.1:9619`, 2 CPUs.")
    factory = box.make_dir(f"demo-factory-{os.getpid()}")
    glideins = submit_glideins(
        box, factory, 2, 2, nodes, name="demo", wrapper_args=["--cron-period", "5"]
    )
    wait_glideins_joined(box, glideins, 180)
    say("   Their startds joined the VO pool:")
    _show_glideins(say, box, glideins)
    return glideins


def _choose(say: Say, box: CondorSandbox, glideins: list[SiteGlidein]) -> SiteGlidein:
    say("6. Which one to ask to leave for 2 CPUs?  The one that completes soonest:")
    out = _admin(
        say,
        "site",
        "victims",
        "--cpus",
        "2",
        "--policy",
        "completion",
        "--pool",
        SITE_POOL.collector,
    )
    chosen = [line.split()[1] for line in out.splitlines() if line.startswith("victim")]
    by_slot = {(site_job(box, g) or {}).get("RemoteHost"): g for g in glideins}
    if not chosen or chosen[0] not in by_slot:
        raise CondorError(f"site victims chose no glidein of this demo: {out!r}")
    return by_slot[chosen[0]]


def _vacate_and_watch(
    say: Say, box: CondorSandbox, g1: SiteGlidein, user_dir: str, short: int
) -> None:
    vo, pool = box.on(VO_POOL), SITE_POOL.collector
    say("   The site asks it to leave, from the central manager (not its execute node):")
    asked = time.monotonic()
    _admin(say, "site", "vacate", g1.job_id, "--pool", pool, "--deadline", "30m")
    say("   The request is in the site job's ad; the node's cron writes it into .site.ad.")
    wait_for(lambda: _retiring(vo, g1), 60, "GLIDEIN_RetireNow", interval=0.5)
    say(
        f"   VO pool: GLIDEIN_RetireNow = true after {time.monotonic() - asked:.1f} s; "
        "it takes no new job."
    )
    late = submit_vo_jobs(vo, user_dir, "demo-late", g1, [VoJob(5, 1, 1)])
    _admin(say, "site", "status", "--pool", pool)

    say("7. Its running VO job finishes; then the glidein leaves and its site job ends.")
    done = wait_for(
        lambda: (j := site_job(box, g1)) and j["JobStatus"] == JobStatus.COMPLETED and j,
        180,
        "the glidein's site job to end",
    )
    for job in vo.history(f"ClusterId == {short}"):
        say(f"   VO job {job['ClusterId']}.{job['ProcId']}: completed, exit {job['ExitCode']}")
    waiting = vo.queue(f"ClusterId == {late}")
    say(f"   the late VO job: {'still idle, never started' if waiting else waiting}")
    say(f"   site job {g1.job_id}: completed, exit code {done.get('ExitCode')}")


def _task_queue_work(
    say: Say, box: CondorSandbox, nodes: list[SiteNode], glideins: list[SiteGlidein]
) -> None:
    """Scene 8: a glidein with a Task Queue runs a W1 workflow through its startd's hooks
    (appended to ``glideins``, which the caller removes)."""
    from glidein_ext.tq.workflow import generate

    vo, site = box.on(VO_POOL), "T2_SANDBOX"
    say("8. The VO's Task Queue (centralized: pilots in the site DHT) gets a W1 workflow of 8")
    say("   tasks; the factory submits a 2-CPU glidein started with `--tq URL --site T2_SANDBOX`")
    say("   and its own pilot credential file.")
    with tempfile.TemporaryDirectory(prefix="glidein-ext-demo-tq-") as tmp:
        tq = LocalTaskQueue(Path(tmp), architecture="centralized").start()
        try:
            operator = tq.operator()
            operator.submit(generate("w1", scale=0.05, sleep=3))
            (credential,) = operator.mint_credentials(site, 1, 3600, "demo glidein")
            factory = box.make_dir(f"demo-tq-{os.getpid()}")
            token = f"{factory}/tq-credential"
            box.write_file(token, credential.secret + "\n")
            box.run("chmod", "600", token)
            se_dir = box.make_dir(f"demo-tq-se-{os.getpid()}")
            wrapper_args = ["--cron-period", "5", "--site", site, "--tq", tq.url, "--se-dir"]
            wrapper_args += [se_dir, "--tq-token-file", "tq-credential", "--fetch-delay", "2"]
            new = submit_glideins(
                box,
                factory,
                1,
                2,
                nodes,
                name="demo-tq",
                wrapper_args=wrapper_args,
                input_files=[token],
            )
            glideins += new
            wait_glideins_joined(box, new, 180)
            say("   Its startd asks its agent for work (FETCH_WORK) and runs each task as a job:")
            seen: set[int] = set()

            def finished() -> bool:
                for ad in vo.status("GlideinExtTqTask =!= undefined"):
                    if int(ad["GlideinExtTqTask"]) not in seen:
                        seen.add(int(ad["GlideinExtTqTask"]))
                        say(
                            f"     VO pool: {ad['Name']} runs task {ad['GlideinExtTqTask']} "
                            f"(Cpus={ad['Cpus']}, fetched, not negotiated)"
                        )
                status = operator.status()
                return status.workflows[0].tasks.get("done", 0) == 8

            wait_for(lambda: finished() or None, 150, "the workflow", interval=1.0)
            status = operator.status()
            say(
                f"   The workflow is done: {status.workflows[0].tasks.get('done')} tasks, each "
                "reported to the Task Queue by the glidein's agent."
            )
            vo_jobs = vo.queue(
                f"GlideinExtVoJob =!= undefined && JobStatus == {JobStatus.RUNNING.value}"
            )
            say(f"   Meanwhile {len(vo_jobs)} VO user job(s) kept running in the other glidein.")
        finally:
            tq.stop()


def run_site_demo(say: Say, keep_pool: bool = False) -> None:
    """Run the site scene end to end; raises GlideinExtError if HTCondor misbehaves."""
    box = CondorSandbox()
    vo = box.on(VO_POOL)
    say("1. Starting two real HTCondor pools (Debian trixie's HTCondor in a chroot):")
    say(f"   the site's pool (collector {SITE_POOL.collector}) and the VO's ({VO_POOL.collector}).")
    started = box.stopped()
    box.start()
    nodes: list[SiteNode] = []
    glideins: list[SiteGlidein] = []
    try:
        say("2. The site starts two execute nodes (4 CPUs each) with its glidein-ext snippet:")
        say("   a startd cron that publishes every pilot's .pilot.ad as PILOT_* in the site pool.")
        nodes = start_site_nodes(box, 2, 4, name="wn", cron_period=5)
        glideins = _start_glideins(say, box, nodes)
        g0, g1 = glideins
        say("4. VO users submit to the VO's schedd: a 2-CPU job (10 min) into the first glidein,")
        say("   a 1-CPU job of 40 s (estimated 1 min) into the second.")
        user_dir = vo.make_dir(f"demo-vo-{os.getpid()}")
        submit_vo_jobs(vo, user_dir, "demo-g0", g0, [VoJob(600, 2, 10)])
        short = submit_vo_jobs(vo, user_dir, "demo-g1", g1, [VoJob(40, 1, 1)])
        running = JobStatus.RUNNING.value
        wait_for(lambda: len(vo.queue(f"JobStatus == {running}")) == 2, 120, "the VO jobs")
        say("5. The site admin looks at the pilots (the site cron reads each .pilot.ad):")
        wait_for(lambda: len(box.status("PILOT_USED_FRACTION1k > 0")) == 2, 60, "PILOT_* published")
        _admin(say, "site", "status", "--pool", SITE_POOL.collector)
        say("   The first wastes nothing if drained now but needs 10 min; the second completes")
        say("   in under a minute (its other CPU idles meanwhile: high relative waste).")
        if _choose(say, box, glideins) != g1:
            raise CondorError("site victims did not choose the glidein that completes first")
        _vacate_and_watch(say, box, g1, user_dir, short)
        _task_queue_work(say, box, nodes, glideins)
        say(
            "Done: the site saw what each pilot was doing, asked the one that frees its CPUs "
            "soonest to leave without a hard kill, and no VO job was lost; a glidein's own "
            "startd ran the Task Queue's tasks as its jobs."
        )
    finally:
        vo.remove("GlideinExtVoJob =!= undefined")
        if glideins:
            box.remove(" || ".join(f"ClusterId == {g.cluster}" for g in glideins))
        stop_site_nodes(nodes)
        if not keep_pool and started:
            box.stop(started)  # only the pools this demo started: others' stay up
