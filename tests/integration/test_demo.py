"""The README's first command: `glidein-ext demo`, run as users run it (the CLI, a subprocess).

The workflow scene (a Task Queue on SQLite, a site of real pilots in three processes, W1 with
real files, pre-DHT then distributed) needs no HTCondor; the drain scene runs in the real pool.
``scripts/demo`` runs both, one after the other (``--scene system``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from glidein_ext.sandbox.pool import CondorSandbox


def _demo(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "glidein_ext", "demo", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _row(output: str, architecture: str) -> list[str]:
    (line,) = [x for x in output.splitlines() if re.match(rf"^\s+{architecture}\s+\d", x)]
    return line.split()


def test_the_workflow_scene_runs_w1_through_both_architectures(tmp_path: Path) -> None:
    done = _demo("--scene", "workflow", "--workdir", str(tmp_path), timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "W1 [" in out  # the live progress line (every 10th state when not a terminal) ...
    assert out.count("80/80 done, 0 running, 0 waiting") == 2, out  # ... and each run's last
    assert "The site's master was pilot" in out
    pre, distributed = _row(out, "pre-dht"), _row(out, "distributed")
    # architecture tasks failed req/task (paper) delay cache local turnaround
    for row in (pre, distributed):
        assert row[1] == "80" and row[2] == "0", out
        assert float(row[6]) >= 0.9, out  # cache hit: every step-1 input from a cache
    assert float(distributed[3]) < float(pre[3]), out  # fewer TQ requests per task
    assert float(distributed[3]) <= 1.5, out
    for architecture in ("pre-dht", "distributed"):  # every task wrote its file on the SE
        files = list((tmp_path / architecture / "site" / "se" / "store").rglob("*.dat"))
        assert len(files) == 80

    # It cleaned up after itself: no pilot or Task Queue process of this run is left (polled: a
    # process it killed may take a moment to be gone).
    def left() -> str:
        found = subprocess.run(
            ["pgrep", "-f", str(tmp_path)], capture_output=True, text=True, check=False
        )
        return found.stdout.strip()

    deadline = time.monotonic() + 15
    while left() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert left() == "", left()


def test_a_pool_scene_without_root_is_a_one_line_error(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("runs as a user without root; CI runs as root")
    done = _demo("--scene", "handshake", timeout=60)
    assert done.returncode != 0
    assert "run it as root" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.condor
def test_the_drain_scene_in_the_real_pool(sandbox: CondorSandbox) -> None:
    done = _demo("--scene", "handshake", "--keep-pool", timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"GLIDEIN_RetireNow = true after [\d.]+ s", out), out
    assert "CAN_POSTPONE_LAST_JOB = false" in out or "CAN_POSTPONE_LAST_JOB = true" in out
    assert "the new job is idle" in out, out
    assert len(re.findall(r"completed, exit 0, started 1 time", out)) == 2, out
    assert "glidein-ext wrapper exited with status 0" in out, out
