"""Shared pytest setup: the condor marker report that .ci/run checks, and the xdist groups."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPORT = Path(__file__).resolve().parent.parent / ".pytest-condor-report.json"
_counts: dict[str, int] = {"passed": 0, "failed": 0, "skipped": 0}


# scripts/test runs pytest-xdist with --dist loadgroup.  Tests that share one resource run in one
# worker, one after another: the HTCondor pool (one per machine), and the CPU-heavy runs (hundreds
# of real pilots, every benchmark, the API fuzz) whose timing would suffer beside each other on a
# 2-core machine.  Everything else spreads over the other workers.
HEAVY_FILES = frozenset(
    {
        "test_tq_architectures.py",
        "test_tq_master_kill.py",
        "test_tq_master_stop.py",
        "test_bench_quick.py",
        "test_tq_fuzz.py",
        "test_experiments_quick.py",
        "test_tq_failover.py",  # PostgreSQL, two TQ instances, three pilot agents
        "test_tq_pool.py",
        "test_tq_pool_workflows.py",
    }
)


# tryfirst: xdist's worker rewrites each grouped test's node id in its own hook of this name, which
# must see the marks these add (a plain hook here would run after it: no groups at all).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    del config
    for item in items:
        if item.get_closest_marker("condor") or "sandbox" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("condor"))
        elif item.path.name in HEAVY_FILES:
            item.add_marker(pytest.mark.xdist_group("heavy"))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "condor" not in report.keywords:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _counts[report.outcome] = _counts.get(report.outcome, 0) + 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    del session
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    REPORT.write_text(json.dumps({**_counts, "exitstatus": int(exitstatus)}) + "\n")
