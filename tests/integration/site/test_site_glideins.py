"""Real glideins at a real site (Sfiligoi 2013 end to end): the site pool runs glideins as
jobs on its execute nodes, their startds join the VO pool, VO users' jobs run in them, and the
site acts on them with its own tools, from a machine that is not their execute node (this host).

Four glideins of the factory's site user ``vo.pilot`` (2 CPUs each) fill two 4-CPU execute nodes:
  G0  one 2-CPU VO job, 10 min estimate: drain waste 0, PRIORITY_FACTOR 10
  G1  one 1-CPU VO job, 10 min estimate: the other CPU would idle, drain waste 100%
  G2  idle at first; gets a short VO job, then `site vacate` (job-ad path) and leaves
  G3  one 2-CPU VO job, 10 min estimate: drain waste 0, PRIORITY_FACTOR 0; the controller asks
      it to leave, then it drains (still running)
Then the site's owner ``cms.user`` (far better priority) submits two 2-CPU jobs: one takes G2's
freed CPUs, and the negotiator preempts G0 (least waste, its rank beaten only by G3, which is
draining) -- never G3, never G1.  The tests share the pools and glideins.  The first two only
look (each waits for what it reads); vacating G2, draining G3 and the owner's preemption each need
the step before, so they are steps of one test, run in that order.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from glidein_ext.adfile import read_ad_with_stat
from glidein_ext.condor import JobStatus
from glidein_ext.glidein.pilotad import PILOT_AD_FILE, PILOT_AD_SCHEMA
from glidein_ext.sandbox.pool import HOST_CLIENT_ENV, SITE_POOL, VO_POOL, CondorSandbox, wait_for
from glidein_ext.sandbox.site import (
    FACTORY,
    SiteGlidein,
    SiteNode,
    SiteUser,
    VoJob,
    glidein_sandbox,
    running_glideins,
    set_priority_factor,
    site_job,
    start_site_nodes,
    stop_site_nodes,
    submit_glideins,
    submit_vo_jobs,
    wait_glideins_joined,
)
from tests.support.cli import run_cli

pytestmark = pytest.mark.condor

POOL = SITE_POOL.collector
OWNER = SiteUser("cms", "user")  # the site's owner VO: the preempting user
RUNNING, IDLE, COMPLETED = JobStatus.RUNNING, JobStatus.IDLE, JobStatus.COMPLETED


@dataclass
class Site:
    box: CondorSandbox  # the site pool
    vo: CondorSandbox  # the VO pool
    nodes: list[SiteNode]
    glideins: list[SiteGlidein]
    vo_dir: str

    def slot(self, glidein: SiteGlidein) -> str:
        """The site slot (dynamic slot name) that runs the glidein's site job."""
        job = site_job(self.box, glidein)
        assert job is not None and job.get("RemoteHost"), glidein.name
        return str(job["RemoteHost"])

    def global_job_id(self, glidein: SiteGlidein) -> str:
        job = site_job(self.box, glidein)
        assert job is not None, glidein.name
        return str(job["GlobalJobId"])

    def slot_ad(self, glidein: SiteGlidein) -> dict[str, Any]:
        ads = self.box.status(f'Name == "{self.slot(glidein)}"')
        assert len(ads) == 1, ads
        return ads[0]


def glidein_ext(*args: str) -> subprocess.CompletedProcess[str]:
    """`glidein-ext ARGS` on this host: not an execute node, no local EXECUTE directory."""
    return run_cli(*args, env={**os.environ, **HOST_CLIENT_ENV}, timeout=120)


@pytest.fixture(scope="module")
def site(sandbox: CondorSandbox) -> Iterator[Site]:
    nodes = start_site_nodes(sandbox, 2, 4, name="wn", cron_period=3)
    vo = sandbox.on(VO_POOL)
    glideins: list[SiteGlidein] = []
    try:
        factory = sandbox.make_dir(f"factory-{os.getpid()}")
        glideins = submit_glideins(
            sandbox,
            factory,
            4,
            2,
            nodes,
            wrapper_args=["--cron-period", "5", "--lifetime", "30m", "--site", "T2_SANDBOX"],
            per_glidein_args=[["--priority-factor", "10"], [], [], ["--priority-factor", "0"]],
        )
        wait_glideins_joined(sandbox, glideins, 180)
        vo_dir = vo.make_dir(f"vo-{os.getpid()}")
        g0, g1, _, g3 = glideins
        submit_vo_jobs(vo, vo_dir, "g0", g0, [VoJob(600, 2, 10)])
        submit_vo_jobs(vo, vo_dir, "g1", g1, [VoJob(600, 1, 10)])
        submit_vo_jobs(vo, vo_dir, "g3", g3, [VoJob(600, 2, 10)])
        wait_for(
            lambda: len(vo.queue(f"JobStatus == {RUNNING.value}")) >= 3, 90, "the VO jobs running"
        )
        yield Site(sandbox, vo, nodes, glideins, vo_dir)
    finally:
        vo.remove("GlideinExtVoJob =!= undefined")
        if glideins:
            sandbox.remove(" || ".join(f"ClusterId == {g.cluster}" for g in glideins))
        sandbox.remove(f'AccountingGroup =?= "{OWNER.accounting_group}"')
        stop_site_nodes(nodes)


def published(site: Site, glideins: list[SiteGlidein]) -> dict[str, dict[str, Any]] | None:
    """Glidein name -> its site slot ad, once the site cron published a busy .pilot.ad for all."""
    out = {}
    for g in glideins:
        ad = site.slot_ad(g)
        if not ad.get("PILOT_USED_FRACTION1k"):
            return None
        out[g.name] = ad
    return out


def test_glideins_are_site_jobs_whose_startds_join_the_vo_pool(site: Site) -> None:
    for g in site.glideins:
        job = site_job(site.box, g)
        assert job is not None and job["JobStatus"] == RUNNING
        assert job["AccountingGroup"] == FACTORY.accounting_group
        ads = site.vo.status(g.vo_constraint())  # its partitionable slot (and a dynamic one)
        assert [a["TotalSlotCpus"] for a in ads if a.get("PartitionableSlot")] == [2]
        for ad in ads:
            assert ad["GLIDEIN_SiteWMS"] == "HTCondor"
            assert ad["GLIDEIN_SiteWMS_JobId"] == g.job_id
            assert ad["GLIDEIN_SiteWMS_GlobalJobId"] == job["GlobalJobId"]
            assert ad["GLIDEIN_SiteWMS_Slot"] == job["RemoteHost"]
            assert ad["GLIDEIN_Site"] == "T2_SANDBOX"
        # Not in the site pool: the site sees only its job.
        assert not site.box.status(g.vo_constraint())
        # Its start dir is the job's scratch dir under the node's EXECUTE, where the cron looks.
        sandbox = glidein_sandbox(site.nodes, job["GlobalJobId"])
        assert sandbox is not None and sandbox.parent.name == "execute"
        assert (sandbox / PILOT_AD_FILE).is_file()
    nodes = {site.slot(g).split("@")[1] for g in site.glideins}
    assert nodes == {n.name for n in site.nodes}


def test_site_status_shows_the_real_glideins(site: Site) -> None:
    g0, g1, _, g3 = site.glideins
    ads = wait_for(lambda: published(site, [g0, g1, g3]), 60, "PILOT_* of the busy glideins")
    assert ads[g0.name]["PILOT_ADD_FINAL_EXP_WASTE1k"] == 0
    assert ads[g1.name]["PILOT_ADD_FINAL_EXP_WASTE1k"] == 1024
    assert ads[g0.name]["PILOT_PRIORITY_FACTOR"] == 10
    for g in (g0, g1):  # the slot carries what the glidein wrote (waste is steady for minutes)
        sandbox = glidein_sandbox(site.nodes, site.global_job_id(g))
        assert sandbox is not None
        values, st = read_ad_with_stat(str(sandbox / PILOT_AD_FILE), PILOT_AD_SCHEMA)
        ad = ads[g.name]
        assert values["ADD_FINAL_EXP_WASTE1k"] == ad["PILOT_ADD_FINAL_EXP_WASTE1k"]
        assert values["USED_FRACTION1k"] == ad["PILOT_USED_FRACTION1k"]
        assert 0 <= st.st_mtime - ad["PILOT_HEARTBEAT_TIME"] < 60
        assert ad["PILOT_HEARTBEAT_STALE"] is False

    proc = glidein_ext("site", "status", "--pool", POOL)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()[1:]}
    # PILOT OWNER CPUS USED WASTE COMPLETES-IN HEARTBEAT DRAINING
    expected = {g0.name: ("2.0", "0%"), g1.name: ("1.0", "100%"), g3.name: ("2.0", "0%")}
    for g in site.glideins:
        row = rows[site.slot(g)]
        assert row[1].startswith(f"{FACTORY.accounting_group}@"), proc.stdout
        assert row[2] == "2"
        if g.name in expected:
            assert tuple(row[3:5]) == expected[g.name], proc.stdout
            assert row[5].endswith("s") and row[7] == "no", proc.stdout
        assert row[6] != "-" and "STALE" not in row, proc.stdout
    proc = glidein_ext("site", "victims", "--cpus", "4", "--pool", POOL)
    assert proc.returncode == 0, proc.stderr
    victims = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("victim")]
    assert len(victims) == 2 and site.slot(g1) not in victims, proc.stdout


def vacate_from_another_machine_drains_the_glidein(site: Site) -> None:
    """Step 1: `site vacate` G2 (job-ad path) from this host; its job finishes, it leaves."""
    g2 = site.glideins[2]
    cluster = submit_vo_jobs(site.vo, site.vo_dir, "g2", g2, [VoJob(25, 1, 1)])
    wait_for(
        lambda: site.vo.queue(f"ClusterId == {cluster} && JobStatus == {RUNNING.value}"),
        60,
        "G2's VO job running",
    )
    site_gjid = site.global_job_id(g2)
    asked = time.monotonic()
    proc = glidein_ext("site", "vacate", g2.job_id, "--pool", POOL, "--deadline", "1h")
    assert proc.returncode == 0, proc.stderr
    assert "via job-ad" in proc.stdout, proc.stdout
    # The request is in the site job's ad; the node's cron turns it into .site.ad.
    (job,) = site.box.queue(f"ClusterId == {g2.cluster}")
    assert job["GlideinExtVacateDesired"] is True
    assert abs(job["GlideinExtPayloadDeadline"] - (time.time() + 3600)) < 120
    wait_for(
        lambda: all(a.get("GLIDEIN_RetireNow") for a in site.vo.status(g2.vo_constraint())),
        30,
        "G2's startd in the VO pool showing GLIDEIN_RetireNow",
        interval=0.5,
    )
    print(f"GLIDEIN_RetireNow {time.monotonic() - asked:.1f} s after `site vacate`")
    sandbox = glidein_sandbox(site.nodes, site_gjid)
    assert sandbox is not None
    assert "VACATE_DESIRED = true" in (sandbox / ".site.ad").read_text()
    late = submit_vo_jobs(site.vo, site.vo_dir, "g2-late", g2, [VoJob(5, 1, 1)])
    # The running VO job finishes; the glidein leaves; its site job ends with exit 0.
    ended = wait_for(
        lambda: (j := site_job(site.box, g2)) and j["JobStatus"] == COMPLETED and j,
        120,
        "G2's site job to end",
    )
    assert ended["ExitCode"] == 0
    (done,) = site.vo.history(f"ClusterId == {cluster}")
    assert done["ExitCode"] == 0 and done.get("NumJobStarts", 1) == 1
    assert not site.vo.status(g2.vo_constraint())
    (waiting,) = site.vo.queue(f"ClusterId == {late}")
    assert waiting["JobStatus"] == IDLE and not waiting.get("NumJobStarts")


def controller_on_another_machine_asks_the_least_waste_glidein(site: Site) -> None:
    """Step 2: the controller, asked for 2 CPUs, drains G3 (no waste, least valued)."""
    g0, g1, _, g3 = site.glideins
    wait_for(lambda: published(site, [g0, g1, g3]), 30, "PILOT_* of the busy glideins")
    proc = glidein_ext(
        "site", "controller", "--owner", OWNER.accounting_group, "--cpus", "2",
        "--cycles", "1", "--grace", "1h", "--pool", POOL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # G0 and G3 both waste nothing if drained now; G3's owner values it less (PRIORITY_FACTOR).
    assert f"vacated {site.slot(g3)} via job-ad" in proc.stderr, proc.stderr
    assert site.slot(g0) not in proc.stderr and site.slot(g1) not in proc.stderr

    def draining() -> dict[str, Any] | None:
        ad = site.slot_ad(g3)
        ok = (
            ad.get("SITE_VACATE_DESIRED") is True and ad.get("PILOT_CAN_POSTPONE_LAST_JOB") is False
        )
        return ad if ok else None

    wait_for(draining, 30, "G3 draining, as the site pool sees it")
    # The VO pool sees it through the glidein's own startd, on its own schedule: wait for it too.
    wait_for(
        lambda: (
            (ads := site.vo.status(g3.vo_constraint()))
            and all(a.get("GLIDEIN_RetireNow") is True for a in ads)
        ),
        30,
        "G3's startd in the VO pool showing GLIDEIN_RetireNow",
        interval=0.5,
    )
    # A second cycle counts G3 as draining and asks nobody else.
    proc = glidein_ext(
        "site", "controller", "--owner", OWNER.accounting_group, "--cpus", "2",
        "--cycles", "1", "--pool", POOL,
    )  # fmt: skip
    assert proc.returncode == 0 and "0 chosen" in proc.stderr and "vacated" not in proc.stderr


def negotiator_preempts_the_least_waste_glidein_never_a_draining_one(site: Site) -> None:
    """Step 3: the owner's two jobs take G2's freed CPUs and preempt G0, never G3 or G1."""
    g0, g1, g2, g3 = site.glideins
    assert g2.name not in running_glideins(site.box, site.glideins)  # it left (step 1)
    assert running_glideins(site.box, site.glideins) == {g0.name, g1.name, g3.name}
    before = {g.name: site.slot(g) for g in (g0, g1, g3)}
    # The site's owner has a far better priority than the opportunistic VO.
    set_priority_factor(site.box, FACTORY, 10000)
    set_priority_factor(site.box, OWNER, 1)
    directory = site.box.make_dir(f"owner-{os.getpid()}")
    requirements = " || ".join(f"({n.requirements()})" for n in site.nodes)
    cluster = site.box.submit(
        directory,
        "owner",
        f"""\
executable = /bin/sleep
arguments = 300
request_cpus = 2
request_memory = 64
request_disk = 1024
should_transfer_files = NO
{chr(10).join(OWNER.submit_lines())}
requirements = {requirements}
log = owner.log
queue 2
""",
    )

    def owner_running() -> list[dict[str, Any]] | None:
        jobs = site.box.queue(f"ClusterId == {cluster} && JobStatus == {RUNNING.value}")
        return jobs if len(jobs) == 2 else None

    jobs = wait_for(owner_running, 90, "both of the owner's jobs running")
    # One took G2's freed CPUs; the other preempted G0: the least drain waste (rank) of the
    # glideins that are not draining.  G3 ranks higher still but is draining; G1 wastes most.
    assert running_glideins(site.box, site.glideins) == {g1.name, g3.name}
    assert before[g0.name] in {j["RemoteHost"] for j in jobs}
    preempted = site_job(site.box, g0)
    assert preempted is not None and preempted["JobStatus"] == IDLE
    assert preempted["NumJobStarts"] == 1
    assert {site.slot(g) for g in (g1, g3)} == {before[g1.name], before[g3.name]}


def test_negotiator_preempts_the_least_waste_glidein_after_a_vacate_and_a_drain(site: Site) -> None:
    """The site's actions in turn (each step needs the one before, so they are one test): G2 is
    vacated and leaves, the controller drains G3, then the negotiator preempts G0 for the owner."""
    vacate_from_another_machine_drains_the_glidein(site)
    controller_on_another_machine_asks_the_least_waste_glidein(site)
    negotiator_preempts_the_least_waste_glidein_never_a_draining_one(site)
