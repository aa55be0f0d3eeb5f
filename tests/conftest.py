"""Shared pytest setup: the condor marker report that .ci/run checks, the xdist groups, and
Hypothesis's profile."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.support.xdist_groups import (  # hooks of this conftest
    pytest_collection_finish,
    pytest_configure_node,
    pytest_unconfigure,
    pytest_xdist_make_scheduler,
)

__all__ = [
    "pytest_collection_finish",
    "pytest_configure_node",
    "pytest_unconfigure",
    "pytest_xdist_make_scheduler",
]

REPORT = Path(__file__).resolve().parent.parent / ".pytest-condor-report.json"
_counts: dict[str, int] = {"passed": 0, "failed": 0, "skipped": 0}


# scripts/test runs pytest-xdist with --dist loadgroup.  Tests that share one resource run in one
# worker, one after another: the HTCondor pool (one per machine: the tests marked ``condor`` and
# those using the ``sandbox`` fixture), and the CPU-heavy runs (marked ``heavy``: hundreds of real
# pilots, every benchmark, the API fuzz) whose timing would suffer beside each other on a 2-core
# machine.  Everything else spreads over the other workers.  The groups reach xdist's scheduler
# through tests/support/xdist_groups.py (pytest 9.2 ignores xdist's own node-id rewrite).


def pytest_configure(config: pytest.Config) -> None:
    """Hypothesis's timing checks (a deadline per example, slow input generation) measure the
    machine, not the code: off, so that a loaded machine fails no property test."""
    del config
    settings.register_profile(
        "glidein-ext", deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    settings.load_profile("glidein-ext")


# tryfirst: under pytest 8 xdist's worker also rewrites each grouped test's node id in its own hook
# of this name, which must see the marks these add.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    del config
    for item in items:
        if item.get_closest_marker("condor") or "sandbox" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("condor"))
        elif item.get_closest_marker("heavy"):
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
