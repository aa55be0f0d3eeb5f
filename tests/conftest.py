"""Shared pytest setup: the condor marker report that .ci/run checks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPORT = Path(__file__).resolve().parent.parent / ".pytest-condor-report.json"
_counts: dict[str, int] = {"passed": 0, "failed": 0, "skipped": 0}


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
