"""`glidein-ext experiment`: the list, one-line usage errors with exit 2, and a small run."""

from __future__ import annotations

import csv
import importlib.util
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest

from glidein_ext.sim.experiments import EXPERIMENTS, OLD_NAMES, find
from tests.support.cli import run_main


def quick(experiment: str, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """``glidein-ext experiment EXPERIMENT --quick --reference-costs --out OUT``, which must
    succeed: its stdout and stderr."""
    args = ["experiment", experiment, "--quick", "--reference-costs", "--out", str(out)]
    code, stdout, stderr = run_main(args, capsys)
    assert code == 0, stdout + stderr
    return stdout, stderr


def test_list_names_every_experiment_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["experiment", "--list"], capsys)
    assert code == 0
    names = [line.split()[0] for line in out.splitlines()]
    assert "dht-scaling" in names and "tq-cache" in names
    assert len(names) == len(set(names)) >= 7
    assert not [name for name in names if name.startswith("seed")]  # the old names stay hidden


def test_the_old_names_still_name_their_experiments() -> None:
    for old, new in OLD_NAMES.items():
        assert find(old) is EXPERIMENTS[new] is find(new), old
    assert find("seed009-nope") is None


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["experiment", "nope", "--out", "x"], "unknown experiment 'nope'"),
        (["experiment", "tq-cache"], "--out DIR is required"),
        (["experiment"], "name an experiment"),
        (["experiment", "tq-cache", "--out", "x", "--seed", "-1"], "--seed"),
        (["experiment", "tq-cache", "--out", "x", "--seed", "one"], "seed"),
    ],
)
def test_bad_names_and_options_are_one_line_and_exit_2(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_main(args, capsys)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert says in err
    assert "Traceback" not in err
    assert len([line for line in lines if "rror" in line]) == 1


def test_a_quick_experiment_writes_its_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cache"
    stdout, _ = quick("tq-cache", out, capsys)
    with (out / "summary.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert {(r["workflow"], r["scheme"]) for r in rows} == {
        (w, c) for w in ("w1", "w2", "w3") for c in ("C1", "C2", "C3")
    }
    assert (out / "fig12_cache_hit.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "C2" in stdout


def test_without_matplotlib_the_command_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name == "matplotlib" else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    code, _, err = run_main(["experiment", "tq-cache", "--out", str(tmp_path / "x")], capsys)
    assert code != 0
    assert "'.[experiments]' in a glidein-ext checkout" in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.strip()]) == 1
    assert not (tmp_path / "x").exists()  # refused before anything was written


def test_progress_lines_come_at_the_first_run_then_every_period_and_at_the_end() -> None:
    from glidein_ext.cli.experiment import ProgressLine

    now = [0.0]
    said: list[str] = []
    progress = ProgressLine("x", 5, said.append, every=10.0, clock=lambda: now[0])
    for at in (2.0, 5.0, 13.0, 14.0, 20.0):
        now[0] = at
        progress.advance(1)
    assert said == [
        "x: 1/5 runs, 2 s, about 8 s left",
        "x: 3/5 runs, 13 s, about 9 s left",
        "x: 5/5 runs, 20 s",
    ]


def test_a_run_whose_stderr_is_not_a_terminal_prints_progress_lines(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [
            *(sys.executable, "-m", "glidein_ext", "experiment", "tq-cache", "--quick"),
            *("--reference-costs", "--out", str(tmp_path / "o")),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "tq-cache: 1/" in done.stderr
    total = done.stderr.split("tq-cache: 1/")[1].split()[0]
    assert f"tq-cache: {total}/{total} runs" in done.stderr


def test_notes_list_the_runs_parameters_and_every_target_met_or_missed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "gs"
    quick("grid-scale", out, capsys)
    notes = (out / "notes.txt").read_text().splitlines()
    assert notes[0].startswith("Experiment grid-scale: --quick, --seed 0, 3 run(s)")
    assert "the reference calibration" in notes[0]
    assert "  architecture: pre-dht, centralized, distributed" in notes
    assert any(line.startswith("  pilots: ") for line in notes)
    assert "Results and targets (met or missed):" in notes
    results = notes[notes.index("Results and targets (met or missed):") + 1 :]
    targets = [line for line in results if "target" in line]
    # every needed-instances line and every one-SQLite-instance line names its targets' fate
    assert len(targets) == len([line for line in results if " at " in line or "SQLite" in line])
    assert all(" met" in line or "missed" in line for line in targets), targets
    assert any("SQLite" in line and "missed" in line for line in targets)
    # the CSV headers carry their units
    for table in ("needed.csv", "grid.csv"):
        columns = (out / table).read_text().splitlines()[0].split(",")
        assert {"first_burst_s", "delay_median_s", "utilization_fraction"} <= set(columns)
        assert "calls_per_s" in columns and "call_ms" in columns
    runs = (out / "runs.csv").read_text().splitlines()[0].split(",")
    assert {"turnaround_s", "cache_hit_fraction", "requests_per_task", "tasks"} <= set(runs)
