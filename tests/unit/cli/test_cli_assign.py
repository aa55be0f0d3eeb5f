"""`glidein-ext tq assign`, run as a real command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def run(*args: str, block_numpy: bool = False) -> subprocess.CompletedProcess[str]:
    if block_numpy:  # a worker node's bare Python: importing numpy or scipy fails
        code = (
            "import sys; sys.modules['numpy'] = None; sys.modules['scipy'] = None;"
            "sys.argv = ['glidein-ext', *sys.argv[1:]];"
            "from glidein_ext.entry import main; main()"
        )
        command = [sys.executable, "-c", code, *args]
    else:
        command = [sys.executable, "-m", "glidein_ext", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "ranks.csv"
    path.write_text(text)
    return str(path)


def test_json_output_of_both_methods(tmp_path: Path) -> None:
    ranks = write(tmp_path, "100,1\n1,\n")
    proc = run("tq", "assign", "--ranks", ranks, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "method": "optimal",
        "pairs": [[0, 1], [1, 0]],
        "served": 2,
        "sum": 2.0,
    }
    proc = run("tq", "assign", "--ranks", ranks, "--method", "greedy", "--json")
    assert json.loads(proc.stdout) == {
        "method": "greedy",
        "pairs": [[0, 0]],
        "served": 1,
        "sum": 100.0,
    }


def test_table_output(tmp_path: Path) -> None:
    proc = run("tq", "assign", "--ranks", write(tmp_path, "10,9\n9,1\n"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["task", "pilot", "rank"]
    assert [line.split() for line in lines[1:3]] == [["0", "1", "9"], ["1", "0", "9"]]
    assert lines[-1] == "optimal: 2 pilots served, rank sum 18"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1,2\n3\n", "line 2: 1 cells, line 1 has 2"),
        ("1,x\n", "'x' is not a number"),
        ("1,inf\n", "not a finite number"),
        ("nan\n", "not a finite number"),
        ("", "the rank matrix is empty"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, text: str, message: str) -> None:
    proc = run("tq", "assign", "--ranks", write(tmp_path, text))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unreadable_files(tmp_path: Path) -> None:
    for path in (str(tmp_path / "missing.csv"), str(tmp_path)):
        proc = run("tq", "assign", "--ranks", path)
        assert proc.returncode == 2
        assert proc.stderr.startswith(f"glidein-ext: error: cannot read {path}: ")
        assert len(proc.stderr.splitlines()) == 1
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00")
    proc = run("tq", "assign", "--ranks", str(binary))
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1


def test_without_numpy_optimal_is_a_clear_error_and_greedy_works(tmp_path: Path) -> None:
    ranks = write(tmp_path, "100,1\n1,\n")
    proc = run("tq", "assign", "--ranks", ranks, block_numpy=True)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "glidein-ext: error: the optimal assignment needs numpy and scipy "
        "(pip install '.[sched]' in a glidein-ext checkout); use the greedy method without them"
    ]
    proc = run("tq", "assign", "--ranks", ranks, "--method", "greedy", "--json", block_numpy=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["pairs"] == [[0, 0]]
