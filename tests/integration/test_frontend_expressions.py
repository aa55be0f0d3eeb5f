"""The glideinWMS frontend's side of GLIDEIN_RemainingUsableTime, against real slot ads.

A glidein (`glidein-ext wrapper`, one hour to live) runs in the sandbox pool with the shipped
start_expr added to its START, as glideinWMS adds a group's start_expr.  Its slot ads, read with
condor_status -long, are evaluated with classad2: the shipped start_expr and the slot's own
Requirements against job ads of different lengths, and the frontend's test for an idle glidein
(tests/support/glideinwms.py), before and after a .site.ad vacate, and after the drain is
cancelled.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from glidein_ext.condor import JobStatus
from glidein_ext.sandbox.pool import CondorSandbox, Glidein, wait_for
from glidein_ext.site.pool import plain
from tests.support.glideinwms import frontend_counts_as_idle, frontend_match

classad2 = pytest.importorskip("classad2")

pytestmark = pytest.mark.condor

# Job ads by length: (attributes, starts on a glidein with about an hour left).
JOBS: dict[str, tuple[dict[str, int], bool]] = {
    "no length": ({}, True),
    "max 10 min": ({"MaxWallTimeMins": 10}, True),
    "max 2 h": ({"MaxWallTimeMins": 120}, False),
    "allowed 10 min": ({"AllowedJobDuration": 600}, True),
    "allowed 2 h before max 10 min": ({"AllowedJobDuration": 7200, "MaxWallTimeMins": 10}, False),
    "estimate 30 min": ({"EstimatedWallTimeMins": 30}, True),
    "estimate 90 min": ({"EstimatedWallTimeMins": 90}, False),
    "max 90 min before estimate 10 min": (
        {"MaxWallTimeMins": 90, "EstimatedWallTimeMins": 10},
        False,
    ),
}


def job_ad(attributes: dict[str, int]) -> Any:
    return classad2.ClassAd(
        {"RequestCpus": 1, "RequestMemory": 64, "RequestDisk": 1024, "Owner": "u", **attributes}
    )


def slot_ads(box: CondorSandbox, glidein: Glidein) -> dict[str, Any]:
    """The glidein's slot ads as HTCondor publishes them: {"pslot": ad, "dynamic": [ads]}."""
    text = box.run("condor_status", "-long", "-constraint", f'GLIDEIN_ExtName == "{glidein.name}"')
    ads = list(classad2.parseAds(text, classad2.ParserType.Old))
    pslots = [ad for ad in ads if ad.get("PartitionableSlot") is True]
    assert len(pslots) == 1, text
    return {"pslot": pslots[0], "dynamic": [ad for ad in ads if ad.get("DynamicSlot") is True]}


def starts(slot: Any, expr: Any) -> dict[str, bool]:
    """Which jobs ``expr`` (MY = slot, TARGET = job) lets start."""
    return {
        name: expr.eval(scope=slot, target=job_ad(attrs)) is True
        for name, (attrs, _) in JOBS.items()
    }


def pslot_status(box: CondorSandbox, glidein: Glidein) -> dict[str, Any]:
    ads = box.status(f'GLIDEIN_ExtName == "{glidein.name}" && PartitionableSlot =?= True')
    return ads[0] if ads else {}


def write_site_ad(box: CondorSandbox, glidein: Glidein, flag: str, state: str, what: str) -> None:
    """``glidein-ext site-ad write <flag>`` for the glidein; wait until its partitionable slot
    is in ``state``."""
    box.run("glidein-ext", "site-ad", "write", glidein.start_dir, flag)
    wait_for(lambda: pslot_status(box, glidein).get("State") == state, 60, what, interval=0.5)


@pytest.fixture
def glidein(sandbox: CondorSandbox) -> Iterator[Glidein]:
    start_expr = frontend_match().get("start_expr")
    assert start_expr
    started = sandbox.start_glidein(
        "g-frontend",
        4,
        memory_mb=8192,
        cron_period=5,
        lifetime="1h",
        extra_args=["--condor-config-line", f"START = ($(START)) && ({start_expr})"],
    )
    yield started
    sandbox.remove(f'GlideinExtTest == "{started.name}"')
    started.stop()


def test_start_expr_and_idle_count_on_real_slot_ads(
    sandbox: CondorSandbox, glidein: Glidein
) -> None:
    start_expr = classad2.ExprTree(frontend_match().get("start_expr"))
    expected = {name: fits for name, (_, fits) in JOBS.items()}

    # A fresh glidein, about an hour left: only jobs that fit in it may start, by the shipped
    # expression and by the START HTCondor publishes (the slot's Requirements).
    ads = slot_ads(sandbox, glidein)
    pslot = ads["pslot"]
    assert 3000 < pslot["GLIDEIN_RemainingUsableTime"] <= 3600
    assert starts(pslot, start_expr) == expected
    assert starts(pslot, pslot.lookup("Requirements")) == expected
    assert frontend_counts_as_idle(plain(pslot))

    # A job runs; the glidein still has free CPUs and memory: the frontend counts it as idle.
    cluster = sandbox.submit(
        glidein.start_dir,
        "sleeper",
        "executable = /bin/sleep\narguments = 600\nrequest_cpus = 1\nrequest_memory = 64\n"
        "request_disk = 1024\nshould_transfer_files = NO\n+MaxWallTimeMins = 15\n"
        f'+GlideinExtTest = "{glidein.name}"\n'
        f'requirements = TARGET.GLIDEIN_ExtName =?= "{glidein.name}"\nqueue\n',
    )
    wait_for(
        lambda: (
            [j["JobStatus"] for j in sandbox.queue(f"ClusterId == {cluster}")]
            == [JobStatus.RUNNING]
        ),
        90,
        "the job to run",
    )
    wait_for(lambda: pslot_status(sandbox, glidein).get("TotalSlots") == 2, 30, "the dynamic slot")
    assert frontend_counts_as_idle(plain(slot_ads(sandbox, glidein)["pslot"]))

    # The site asks the glidein to leave: it is retiring, its partitionable slot is in the
    # Owner state (not idle to the frontend), it starts nothing, and the running job goes on.
    write_site_ad(
        sandbox,
        glidein,
        "--vacate",
        "Owner",
        "the retiring glidein's partitionable slot in the Owner state",
    )
    ads = slot_ads(sandbox, glidein)
    pslot = ads["pslot"]
    assert pslot["GLIDEIN_RetireNow"] is True
    assert pslot["GLIDEIN_RemainingUsableTime"] == 0
    assert not frontend_counts_as_idle(plain(pslot))
    assert starts(pslot, start_expr) == dict.fromkeys(JOBS, False)
    assert starts(pslot, pslot.lookup("Requirements")) == dict.fromkeys(JOBS, False)
    assert [(d["State"], d["Activity"]) for d in ads["dynamic"]] == [("Claimed", "Retiring")]
    assert [j["JobStatus"] for j in sandbox.queue(f"ClusterId == {cluster}")] == [JobStatus.RUNNING]

    # The site cancels: the glidein is available again, and counted as idle again.
    write_site_ad(
        sandbox, glidein, "--no-vacate", "Unclaimed", "the partitionable slot Unclaimed again"
    )
    pslot = slot_ads(sandbox, glidein)["pslot"]
    assert pslot["GLIDEIN_RemainingUsableTime"] > 3000
    assert frontend_counts_as_idle(plain(pslot))
    assert starts(pslot, pslot.lookup("Requirements")) == expected
