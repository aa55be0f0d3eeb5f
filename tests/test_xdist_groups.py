"""The xdist groups of tests/conftest.py hold: every HTCondor test runs in one worker (they share
one pool on this machine), and so do the heavy ones, as ``scripts/test`` runs them (``-n 3 --dist
loadgroup``).  pytest 9.2 ignores xdist's own node-id rewrite, which spread them over the workers;
tests/support/xdist_groups.py hands the groups to the scheduler on their own channel."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent

CONFTEST = """
import pytest
from tests.conftest import (
    pytest_collection_finish,
    pytest_collection_modifyitems,
    pytest_configure_node,
    pytest_unconfigure,
    pytest_xdist_make_scheduler,
)

@pytest.fixture
def sandbox():
    return "pool"
"""

CASES = """
import time
import pytest

@pytest.mark.condor
@pytest.mark.parametrize("i", range(4))
def test_in_the_pool(i):
    time.sleep(0.2)

@pytest.mark.parametrize("i", range(4))
def test_with_the_sandbox(sandbox, i):
    time.sleep(0.2)

@pytest.mark.heavy
@pytest.mark.parametrize("i", range(6))
def test_heavy(i):
    time.sleep(0.2)

@pytest.mark.parametrize("i", range(9))
def test_elsewhere(i):
    time.sleep(0.2)
"""

INI = """
[pytest]
markers =
    condor: the pool
    heavy: heavy
    xdist_group(name): xdist
addopts = --strict-markers
"""


def run_in_workers(tmp_path: Path) -> dict[str, set[str]]:
    """Run CASES with -n 3 --dist loadgroup; the workers each test function ran in."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_cases.py").write_text(CASES)
    (tmp_path / "pytest.ini").write_text(INI)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "3",
            "--dist",
            "loadgroup",
            "-v",
            "-p",
            "no:cacheprovider",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    workers: dict[str, set[str]] = defaultdict(set)
    ran = 0
    for worker, function in re.findall(r"\[(gw\d+)\].*PASSED test_cases.py::(\w+)\[", done.stdout):
        workers[function].add(worker)
        ran += 1
    assert ran == 23, done.stdout[-2000:]
    return workers


def test_the_pools_tests_run_in_one_worker_and_the_heavy_ones_in_one(tmp_path: Path) -> None:
    workers = run_in_workers(tmp_path)
    # The condor mark and the sandbox fixture: one group, one worker.
    assert len(workers["test_in_the_pool"] | workers["test_with_the_sandbox"]) == 1, workers
    assert len(workers["test_heavy"]) == 1, workers
    # The rest spreads (what the groups are measured against: without them, so would these).
    assert len(workers["test_elsewhere"]) > 1, workers


def test_a_worker_without_its_groups_file_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler refuses a worker whose groups it cannot read rather than spread its tests."""
    from tests.support import xdist_groups

    node = SimpleNamespace(
        workerinput={xdist_groups.WORKERINPUT_KEY: str(tmp_path), "workerid": "gw7"},
        gateway=SimpleNamespace(id="gw7"),
    )
    config = SimpleNamespace(getvalue={"dist": "loadgroup"}.get)
    pytest.importorskip("xdist")
    monkeypatch.setattr("xdist.scheduler.LoadGroupScheduling.__init__", lambda *a, **k: None)
    scheduler = xdist_groups.pytest_xdist_make_scheduler(config, None)  # type: ignore[arg-type]
    assert scheduler is not None
    with pytest.raises(RuntimeError, match="xdist groups of gw7 unreadable"):
        scheduler.add_node_collection(node, ["t.py::a"])
    (tmp_path / "gw7.json").write_text('{"t.py::a": "condor"}')
    monkeypatch.setattr("xdist.scheduler.LoadGroupScheduling.add_node_collection", lambda *a: None)
    scheduler.add_node_collection(node, ["t.py::a"])
    assert scheduler._split_scope("t.py::a") == "condor"
