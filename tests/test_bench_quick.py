"""Every benchmark's ``--quick`` form runs and prints its table (not timed: targets live in the
benchmarks themselves, run by hand on a quiet machine)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

# CPU-heavy: runs in one xdist worker with the other heavy tests (tests/conftest.py).
pytestmark = pytest.mark.heavy

BENCH = Path(__file__).resolve().parent.parent / "bench"
BENCHMARKS = sorted(p.name for p in BENCH.glob("*_bench.py"))


def test_every_benchmark_is_listed() -> None:
    assert len(BENCHMARKS) >= 5


@pytest.mark.parametrize("name", BENCHMARKS)
def test_quick_benchmark_runs(name: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / name), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    # each prints a table: a header line and at least one row of numbers
    rows = [line for line in proc.stdout.splitlines() if any(c.isdigit() for c in line)]
    assert len(rows) >= 2, proc.stdout


def test_no_benchmark_imports_the_tests() -> None:
    """Benchmarks are product-side tools: what they share with the tests is in the package
    (glidein_ext.testbed), so a benchmark runs from an installed package without the tests."""
    found = []
    for path in sorted(BENCH.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [f"{path.name}: {name}" for name in names if name.split(".")[0] == "tests"]
    assert found == []
