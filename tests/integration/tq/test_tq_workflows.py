"""W1, W2 and W3 (Hasham 2011 §V) complete on the real service with real pilot agents."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from glidein_ext.testbed.tq_server import OPERATOR
from glidein_ext.tq.workflow import generate


def _tq_status(url: str, token: str) -> subprocess.CompletedProcess[str]:
    """`glidein-ext tq status` with the operator token in its environment."""
    return subprocess.run(
        [sys.executable, "-m", "glidein_ext", "tq", "status", "--tq", url],
        env={**os.environ, "GLIDEIN_EXT_TQ_OPERATOR_TOKEN": token},
        capture_output=True,
        text=True,
        check=False,
    )


def test_w1_w2_w3_complete(
    tq_server: Callable[..., Any],
    pilots: Any,
    wait_until: Callable[..., Any],
    all_finished: Callable[..., Any],
    tmp_path: Path,
) -> None:
    server = tq_server(wait_for_data="5")
    client = server.operator()
    totals = 0
    for kind in ("w1", "w2", "w3"):
        data = generate(kind, scale=0.1, size=100)
        totals += len(data["tasks"])
        assert client.submit(data).tasks == len(data["tasks"])
    # two hosts with two pilots each: cache-per-host can serve neighbours' files
    for name, host in (("p1", "wnA"), ("p2", "wnA"), ("p3", "wnB"), ("p4", "wnB")):
        pilots.start(server.url, name, "--max-idle", "6", host=host)
    status = wait_until(lambda: all_finished(client), 120, "W1, W2 and W3 to finish")
    by_name = {wf.name: wf.tasks for wf in status.workflows}
    assert by_name["w1"]["done"] == 16 and by_name["w2"]["done"] == 12
    assert by_name["w3"]["done"] == 12
    assert sum(t["failed"] for t in by_name.values()) == 0
    assert status.completions == totals
    se = pilots.se_dir / "store"
    # merging (W3): step1 job j read step0 files 2j and 2j+1
    merged = (se / "w3/step1/f0001.dat").read_bytes()
    assert b"w3-s1-0001" in merged and b"w3-s0-0002" in merged and b"w3-s0-0003" in merged
    # splitting (W2): step1 jobs 2 and 3 both read step0 file 1
    for j in (2, 3):
        assert b"w2-s0-0001" in (se / f"w2/step1/f{j:04d}.dat").read_bytes()
    # chain (W1): locality + waitForData send step1 jobs to the pilot (or host) caching the input
    with sqlite3.connect(server.database) as db:
        reports = [r for (r,) in db.execute("SELECT report FROM tasks WHERE name LIKE 'w1-s1-%'")]
    local = sum(1 for r in reports if ":cache" in r or ":host" in r)
    assert len(reports) == 8 and local >= 6, reports
    for process in pilots.processes:
        assert process.wait(timeout=30) == 0
    shown = _tq_status(server.url, OPERATOR)
    assert shown.returncode == 0, shown.stderr
    assert "[##############################] 16/16" in shown.stdout and "done=16" in shown.stdout
    assert "gone=4" in shown.stdout
    refused = _tq_status(server.url, "wrong")
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert "operator token" in refused.stderr
