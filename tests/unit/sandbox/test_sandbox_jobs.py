"""The sandbox's sleep jobs for a glidein (``sandbox.site.vo_job_submit``): one submit text for
the demos and the HTCondor tests, each job with its own limit or the submission's."""

from __future__ import annotations

from glidein_ext.sandbox.site import VoJob, vo_job_submit


def test_each_job_carries_its_own_limit_or_the_submissions() -> None:
    text = vo_job_submit(
        "t1", "g-1", [VoJob(120, 2, 3, 10), VoJob(5)], tag_attribute="Mark", max_wall_min=30
    )
    lines = text.splitlines()
    assert "+MaxWallTimeMins = $(maxm)" in lines
    assert "+EstimatedWallTimeMins = $(est)" in lines
    assert '+Mark = "t1"' in lines
    assert 'requirements = TARGET.GLIDEIN_ExtName =?= "g-1"' in lines
    start = lines.index("queue secs, cpus, est, maxm from (")
    assert lines[start + 1 :] == ["  120, 2, 3, 10", "  5, 1, 1, 30", ")"]
