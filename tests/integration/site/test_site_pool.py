"""The site's side in the real pool (Sfiligoi 2013): a site execute node (its own startd with the
site snippet and the propagate cron) runs four small jobs that act as pilots; the site tools read,
rank, vacate and hard-kill them through HTCondor itself.

Pilots (2 CPUs each; values on the command line of tests/integration/site/site_fake_pilot.py):
  A  USED 1024, waste 100, ends in 1 h,   obeys .site.ad
  B  USED  512, waste 700, ends in 10 min, obeys .site.ad  (vacated by hand)
  C  USED 1024, waste  10, ends in 30 min, IGNORES .site.ad (hard-killed by the controller)
  D  USED  256, waste  50, ends in 2 h,   frozen heartbeat  (stale)
The tests share the node; each waits for the slots it reads (and for D's heartbeat to go stale
where it counts), so any of them runs alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from glidein_ext.condor import JobStatus
from glidein_ext.sandbox.pool import CondorSandbox, wait_for
from tests.support.cli import run_cli
from tests.support.site_node import CHROOT_SRC, SiteNode, start_site_node

pytestmark = pytest.mark.condor

POOL = "127.0.0.1:9618"
STALE_AFTER = 8
PILOTS = {  # name: used1k, waste1k, expected end in, priority, obey, heartbeat
    "A": (1024, 100, 3600, 0, "obey", "heartbeat"),
    "B": (512, 700, 600, 0, "obey", "heartbeat"),
    "C": (1024, 10, 1800, 0, "ignore", "heartbeat"),
    "D": (256, 50, 7200, 0, "obey", "frozen"),
}


def submit_text(node: SiteNode) -> str:
    rows = "\n".join(f"  {n}, {' '.join(str(v) for v in vals)}" for n, vals in PILOTS.items())
    return f"""\
executable = /usr/bin/python3
arguments = {CHROOT_SRC}/tests/integration/site/site_fake_pilot.py $(args) 900
environment = "PYTHONPATH={CHROOT_SRC}"
request_cpus = 2
request_memory = 64
request_disk = 1024
should_transfer_files = YES
when_to_transfer_output = ON_EXIT
transfer_executable = false
+SitePilot = "$(pilot)"
requirements = {node.requirements()} && (MY.NumJobStarts =?= undefined || MY.NumJobStarts == 0)
log = pilots.log
queue pilot, args from (
{rows}
)
"""


@pytest.fixture(scope="module")
def node(sandbox: CondorSandbox) -> Iterator[SiteNode]:
    site = start_site_node(
        sandbox,
        "site",
        8,
        cron_period=3,
        extra_config=[f"GLIDEIN_EXT_SITE_STALE_AFTER = {STALE_AFTER}"],
    )
    cluster = sandbox.submit(site.local_dir, "pilots", submit_text(site))
    try:
        yield site
    finally:
        sandbox.remove(f"ClusterId == {cluster}")
        site.stop()


def slots(box: CondorSandbox, node: SiteNode) -> dict[str, dict[str, Any]]:
    """Pilot letter -> its slot ad (via the job's GlobalJobId)."""
    running = JobStatus.RUNNING.value
    jobs = box.queue(
        f'SitePilot =!= undefined && JobStatus == {running} && Iwd == "{node.local_dir}"'
    )
    by_gjid = {j["GlobalJobId"]: j["SitePilot"] for j in jobs}
    ads = box.status(f'GlideinExtSiteNode == "{node.name}" && DynamicSlot =?= true')
    return {by_gjid[a["GlobalJobId"]]: a for a in ads if a.get("GlobalJobId") in by_gjid}


def glidein_ext(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=os.environ, timeout=120)


def all_published(
    box: CondorSandbox, node: SiteNode, letters: str = "ABCD", stale: str = ""
) -> dict[str, dict[str, Any]] | None:
    """The slots, once those of ``letters`` show their pilot's PILOT_* (and those of ``stale`` a
    stale heartbeat)."""
    found = slots(box, node)
    if not set(letters) <= set(found):
        return None
    if any(found[p].get("PILOT_USED_FRACTION1k") is None for p in letters):
        return None
    if any(found[p].get("PILOT_HEARTBEAT_STALE") is not True for p in stale):
        return None
    return found


def test_each_slot_shows_its_own_pilot(sandbox: CondorSandbox, node: SiteNode) -> None:
    found = wait_for(lambda: all_published(sandbox, node), 120, "PILOT_* on all four slots")
    out = sandbox.run(
        "condor_status",
        "-constraint",
        f'GlideinExtSiteNode == "{node.name}" && DynamicSlot =?= true',
        "-af",
        "Name",
        "PILOT_USED_FRACTION1k",
        "PILOT_ADD_FINAL_EXP_WASTE1k",
    )
    rows = {line.split()[0]: line.split()[1:] for line in out.strip().splitlines()}
    for letter, ad in found.items():
        used, waste = PILOTS[letter][:2]
        assert rows[ad["Name"]] == [str(used), str(waste)], (letter, rows)
    assert len({ad["Name"] for ad in found.values()}) == 4


def test_stale_heartbeat_is_flagged(sandbox: CondorSandbox, node: SiteNode) -> None:
    def stale() -> dict[str, dict[str, Any]] | None:
        found = slots(sandbox, node)
        return found if found.get("D", {}).get("PILOT_HEARTBEAT_STALE") is True else None

    found = wait_for(stale, 60, "D's heartbeat flagged stale")
    assert found["D"]["PILOT_HEARTBEAT_AGE"] > STALE_AFTER
    assert all(found[p]["PILOT_HEARTBEAT_STALE"] is False for p in "ABC")


def test_site_status_and_victims(sandbox: CondorSandbox, node: SiteNode, tmp_path: Path) -> None:
    found = wait_for(
        lambda: all_published(sandbox, node, stale="D"), 120, "PILOT_* on all four, D stale"
    )
    names = {p: ad["Name"] for p, ad in found.items()}
    ads = tmp_path / "slots.long"
    ads.write_text(
        sandbox.run(
            "condor_status",
            "-long",
            "-constraint",
            f'GlideinExtSiteNode == "{node.name}" && DynamicSlot =?= true',
        )
    )
    prio = tmp_path / "userprio"
    prio.write_text(sandbox.run("condor_userprio", "-allusers"))
    proc = glidein_ext("site", "victims", "--cpus", "4", "--ads", str(ads), "--userprio", str(prio))
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()[2:]]
    # Lowest waste first (C 10, A 100); D (waste 50) is stale: a hard-kill candidate instead.
    assert [(r[0], r[1]) for r in rows] == [
        ("victim", names["C"]),
        ("victim", names["A"]),
        ("hard-kill?", names["D"]),
    ], proc.stdout
    proc = glidein_ext(
        "site", "victims", "--cpus", "4", "--policy", "completion", "--ads", str(ads)
    )
    victims = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("victim")]
    assert victims == [names["B"], names["C"]], proc.stdout  # ends in 10 min, then 30 min
    live = glidein_ext("site", "status", "--pool", POOL)
    assert live.returncode == 0, live.stderr
    for letter in "ABCD":
        assert names[letter] in live.stdout
    d_row = next(line for line in live.stdout.splitlines() if line.startswith(names["D"]))
    assert "STALE" in d_row


def test_negotiator_snippet_parses_and_evaluates(sandbox: CondorSandbox, node: SiteNode) -> None:
    import classad2

    def val(name: str) -> str:
        return sandbox.run("env", f"CONDOR_CONFIG={node.config}", "condor_config_val", name).strip()

    assert "GLIDEINEXTSITE" in val("STARTD_CRON_JOBLIST").split()
    assert val("STARTD_CRON_GLIDEINEXTSITE_ARGS").startswith(
        f"site propagate --execute-dir {node.local_dir}/execute --stale-after {STALE_AFTER}"
    )
    assert val("PREEMPTION_REQUIREMENTS").startswith("(True) && ")
    requirements = classad2.ExprTree(val("PREEMPTION_REQUIREMENTS"))
    rank = classad2.ExprTree(val("PREEMPTION_RANK"))
    found = wait_for(lambda: all_published(sandbox, node), 120, "PILOT_* on all four slots")
    job = classad2.ClassAd({"Owner": "cms", "RequestCpus": 2})
    ranks = {}
    for letter, ad in found.items():
        slot = classad2.ClassAd()
        for key, value in ad.items():
            slot[key] = value
        slot["RemoteUserPrio"] = 500.0
        assert requirements.eval(slot, job) is True, letter
        ranks[letter] = rank.eval(slot, job)
        slot["PILOT_CAN_POSTPONE_LAST_JOB"] = False
        assert requirements.eval(slot, job) is False, letter
    # Lower waste is preempted first: C (10) > D (50) > A (100) > B (700).
    assert sorted(ranks, key=lambda k: -ranks[k]) == ["C", "D", "A", "B"]
    # A less privileged user's pilot comes before any of a better user's.
    worse = classad2.ClassAd()
    for key, value in found["B"].items():
        worse[key] = value
    worse["RemoteUserPrio"] = 5000.0
    assert rank.eval(worse, job) > ranks["C"]


def test_vacate_writes_site_ad_and_the_pilot_drains(sandbox: CondorSandbox, node: SiteNode) -> None:
    found = wait_for(lambda: all_published(sandbox, node, "B"), 120, "PILOT_* on B's slot")
    b_slot, b_gjid = found["B"]["Name"], found["B"]["GlobalJobId"]
    execute = str(node.host_dir / "execute")
    proc = glidein_ext(
        "site",
        "vacate",
        "--slot",
        b_slot,
        "--deadline",
        "2h",
        "--pool",
        POOL,
        "--execute-dir",
        execute,
    )
    assert proc.returncode == 0, proc.stderr
    assert "via local" in proc.stdout
    sandbox_dir = Path(proc.stdout.split("(")[1].split(")")[0])
    text = (sandbox_dir / ".site.ad").read_text()
    assert "VACATE_DESIRED = true" in text
    deadline = int(text.split("PAYLOAD_DEADLINE = ")[1].split()[0])
    assert abs(deadline - (time.time() + 7200)) < 120
    # Only B's sandbox got it.
    others = [
        p for p in (node.host_dir / "execute").glob("dir_*/.site.ad") if p.parent != sandbox_dir
    ]
    assert others == []

    def draining() -> bool:
        ad = slots(sandbox, node).get("B")
        return ad is not None and ad.get("PILOT_CAN_POSTPONE_LAST_JOB") is False

    wait_for(draining, 45, "B's slot showing it drains")
    wait_for(
        lambda: (
            not sandbox.queue(
                f'GlobalJobId == "{b_gjid}" && JobStatus == {JobStatus.RUNNING.value}'
            )
        ),
        60,
        "B leaving",
    )
    assert sandbox.history(f'GlobalJobId == "{b_gjid}"')[0]["ExitCode"] == 0


def test_controller_hard_kills_a_pilot_that_ignores_its_deadline(
    sandbox: CondorSandbox, node: SiteNode
) -> None:
    # C and A published, D stale: C is the least waste of the pilots the controller may ask.
    found = wait_for(
        lambda: all_published(sandbox, node, "ACD", stale="D"), 120, "PILOT_* on A, C, D; D stale"
    )
    c_slot, c_gjid = found["C"]["Name"], found["C"]["GlobalJobId"]
    a_slot = found["A"]["Name"]
    execute = str(node.host_dir / "execute")
    proc = subprocess.run(
        [
            sys.executable, "-m", "glidein_ext", "site", "controller",
            "--owner", "cms", "--cpus", "2", "--grace", "4s", "--kill-margin", "1s",
            "--interval", "3s", "--cycles", "5", "--pool", POOL, "--execute-dir", execute,
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    log = proc.stderr
    assert proc.returncode == 0, log
    # Cycle 1 picks C (lowest waste; D is stale), later cycles count it as draining, then kill it.
    assert f"vacate {c_slot} (deadline" in log, log
    assert f"counted {c_slot}: already draining (site asked)" in log, log
    assert f"hard-kill {c_slot} by vacate: still running" in log, log
    # Once C is gone the need is open again: only then is the next-best pilot (A) asked.
    kill_at = log.index(f"hard-kill {c_slot}")
    assert f"vacate {a_slot}" not in log[:kill_at]
    assert log.count("vacate " + c_slot + " (deadline") == 1  # asked once, not every cycle
    wait_for(
        lambda: sandbox.queue(f'GlobalJobId == "{c_gjid}" && JobStatus == {JobStatus.IDLE.value}'),
        60,
        "C evicted back to idle",
    )
    assert os.path.isdir(execute)
