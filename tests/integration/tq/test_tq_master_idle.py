"""A master pilot runs no task, but it is not idle while its site has work (Delgado Peris 2014
§III.B): with ``pilot run --max-idle``, the master stays for the whole workflow (one epoch), and
once the site's work is done every pilot, the master too, leaves by itself."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from glidein_ext.testbed.site_runs import SITE, SiteRun

pytestmark = pytest.mark.heavy  # real processes: with the other heavy tests (tests/conftest.py)

MAX_IDLE = 8.0


def test_the_master_stays_while_its_site_has_work_and_leaves_when_it_has_none(
    tmp_path: Path,
) -> None:
    with SiteRun(
        tmp_path / "site",
        "distributed",
        pilots=4,
        processes=1,
        first_alone=True,  # pilot 1 registers first: the master
        pilot_args=(
            *("--max-idle", str(MAX_IDLE)),
            *("--round-period", "1", "--round-window", "0.1"),
        ),
    ) as site:
        started = time.monotonic()
        counters = site.run_workflow("w1", 0.2, sleep=0.8)  # longer than MAX_IDLE on 3 workers
        took = time.monotonic() - started
        assert counters["tasks_done"] >= counters["tasks"]
        assert took > MAX_IDLE, "the workflow must outlast the idle limit to show anything"
        masters = site.operator.call("GET", "/api/v1/counters")["masters"][SITE]
        assert [(m["pilot_id"], m["epoch"]) for m in masters] == [(1, 1)], site.logs()
        # The site is idle now: every pilot leaves after MAX_IDLE, the master among them.
        for process in site.procs:
            assert process.wait(timeout=MAX_IDLE + 60) == 0, site.logs()
