"""Every experiment's ``--quick`` form runs through the real command (``glidein-ext experiment``)
and writes its CSV files with their columns and valid PNG figures (the quick versions
run in CI; all of them take well under two minutes here)."""

from __future__ import annotations

import csv
import os
import struct
import zlib
from pathlib import Path

import pytest

from glidein_ext.sim.experiments import EXPERIMENTS
from tests.support.cli import run_cli

# CPU-heavy: runs in one xdist worker with the other heavy tests (tests/conftest.py).
pytestmark = pytest.mark.heavy

KEYS = {
    "dht-scaling": {"series", "size", "pilots", "workflow", "seed"},
    "dht-timeline": {"series", "pilots", "workflow", "seed"},
    "dht-targets": {"series", "pilots", "workflow", "seed"},
    "tq-submission": {"workflow", "condition", "scheme", "submission", "seed"},
    "tq-storage": {"workflow", "condition", "scheme", "submission", "seed"},
    "tq-cache": {"workflow", "condition", "scheme", "submission", "seed"},
    "tq-grid": {"workflow", "condition", "scheme", "submission", "seed"},
    "draining-victims": {
        "policy",
        "pilots",
        "cpus",
        "workflow",
        "seed",
        "drain_mean_s",
        "drain_max_s",
        "se_rereads",
        "victims_needed_mb",
    },
    "grid-scale": {"architecture", "pilots", "tasks", "seed"},
}
# The headers carry their units (glidein_ext.sim.experiments.base.UNITS).
METRICS = {
    "requests_per_task",
    "delay_median_s",
    "turnaround_s",
    "cache_hit_fraction",
    "local_hit_fraction",
}
FIGURES = {
    "dht-scaling": 5,
    "dht-timeline": 3,
    "dht-targets": 0,
    "tq-submission": 1,
    "tq-storage": 4,
    "tq-cache": 1,
    "tq-grid": 0,
    "draining-victims": 2,
    "grid-scale": 2,
}


def test_every_experiment_is_checked_here() -> None:
    assert set(EXPERIMENTS) == set(KEYS) == set(FIGURES)


def valid_png(path: Path) -> bool:
    """The signature, then every chunk's CRC, up to IEND."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return False
    offset = 8
    while offset + 12 <= len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", data[offset + 8 + length : offset + 12 + length])
        if zlib.crc32(kind + body) != crc:
            return False
        if kind == b"IEND":
            return True
        offset += 12 + length
    return False


@pytest.mark.parametrize("name", sorted(KEYS))
def test_quick_experiment(name: str, tmp_path: Path) -> None:
    out = tmp_path / name
    proc = run_cli("experiment", name, "--quick", "--out", str(out), env=os.environ, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    with (out / "runs.csv").open(encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
        columns = set(reader.fieldnames or ())
    assert KEYS[name] | METRICS <= columns
    assert rows and all(row["tasks"] for row in rows)
    assert (out / "calibration.json").is_file() and (out / "notes.txt").is_file()
    notes = (out / "notes.txt").read_text(encoding="utf-8").splitlines()
    assert notes[0].startswith(f"Experiment {name}: --quick, --seed 0"), notes[:2]
    assert "Parameters of the runs (SimConfig; several values: the runs vary over them):" in notes
    figures = sorted(out.glob("*.png"))
    assert len(figures) == FIGURES[name]
    for figure in figures:
        assert valid_png(figure), figure.name
    if name == "dht-targets":
        with (out / "targets.csv").open(encoding="utf-8") as handle:
            verdicts = list(csv.DictReader(handle))
        assert {v["metric"] for v in verdicts} == {
            "requests_per_task",
            "delay_median",
            "first_burst",
            "local_hit",
        }
        assert all(v["met"] in ("yes", "no") for v in verdicts)
        # notes.txt: every target, met or missed, one line each
        told = [line for line in notes if line.endswith(": met") or ": missed by " in line]
        assert len(told) == len(verdicts), notes
        # pre-DHT's reference runs as many pilots as the two distributed sites have workers
        pilots = {row["series"]: int(row["pilots"]) for row in rows}
        assert pilots["pre-DHT (ours)"] == pilots["distributed (ours)"] - 2
        # The distributed master offers local work first: W1's inputs are read from the pilots'
        # own caches (target 0.95) even at the quick size.
        w1_local = [v for v in verdicts if v["metric"] == "local_hit" and v["workflow"] == "w1"]
        assert w1_local
        assert all(v["met"] == "yes" for v in w1_local), w1_local
    if name == "draining-victims":
        with (out / "rereads.csv").open(encoding="utf-8") as handle:
            cells = list(csv.DictReader(handle))
        assert {c["policy"] for c in cells} == {"completion", "waste", "cache"}
        assert all(c["se_rereads"] != "" for c in cells)
    if name == "grid-scale":
        with (out / "needed.csv").open(encoding="utf-8") as handle:
            needed = {(r["cost"], r["architecture"]): r for r in csv.DictReader(handle)}
        assert len(needed) == 9  # three per-call costs x three architectures
        for (_, arch), row in needed.items():
            assert row["meets"] == "yes", (arch, row)
            assert float(row["first_burst_s"]) < 60 and float(row["delay_median_s"]) < 1
        for cost in {c for c, _ in needed}:  # the distributed architecture needs the fewest
            distributed = int(needed[cost, "distributed"]["instances"])
            assert distributed < int(needed[cost, "pre-dht"]["instances"])
        with (out / "validation.csv").open(encoding="utf-8") as handle:
            checks = list(csv.DictReader(handle))
        assert {c["architecture"] for c in checks} == {"pre-dht", "centralized", "distributed"}
        assert all(c["simulated"] and c["model"] for c in checks)
