"""The xdist groups of tests/conftest.py hold: every HTCondor test runs in one worker (they share
one pool on this machine), as ``scripts/test`` runs them (``-n 3 --dist loadgroup``).  pytest 9
silently ignores xdist's node-id rewrite, which spread them over the workers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CASES = """
import os, time
import pytest

@pytest.mark.condor
@pytest.mark.parametrize("i", range(6))
def test_in_the_pool(i):
    time.sleep(0.2)

@pytest.mark.parametrize("i", range(6))
def test_elsewhere(i):
    time.sleep(0.2)
"""


def test_every_condor_test_runs_in_one_worker(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_collection_modifyitems  # noqa: F401\n"
    )
    (tmp_path / "test_cases.py").write_text(CASES)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "-v"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    workers = re.findall(r"\[(gw\d+)\].*PASSED test_cases.py::test_in_the_pool", done.stdout)
    assert len(workers) == 6, done.stdout[-2000:]
    assert len(set(workers)) == 1, done.stdout[-2000:]
