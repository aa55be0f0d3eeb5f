"""The main demo's pure parts: the live progress line and the final table."""

from __future__ import annotations

from glidein_ext.demos.system import ArchitectureResult, progress_line, results_table


def test_progress_line_counts_done_running_and_waiting() -> None:
    line = progress_line(
        "W1", {"done": 20, "failed": 2, "running": 8, "queued": 5, "waiting": 5}, 12.4, 10
    )
    assert line == "   W1 [######....] 22/40 done, 8 running, 10 waiting  12 s"
    assert progress_line("W1", {}, 0, 4).startswith("   W1 [....] 0/0 done")


def test_results_table_puts_the_seeds_value_beside_ours() -> None:
    rows = [
        ArchitectureResult("pre-dht", 80, 80, 0, 3.3, 0.02, 1.0, 0.9, 16.8, 80),
        ArchitectureResult("distributed", 80, 79, 1, 0.62, None, None, None, None, 79),
    ]
    lines = results_table(rows).splitlines()
    assert lines[0].split()[:4] == ["architecture", "tasks", "failed", "TQ"]
    assert lines[1].split() == ["pre-dht", "80", "0", "3.30", "12", "0.02", "1.00", "0.90", "16.8"]
    assert lines[2].split() == ["distributed", "80", "1", "0.62", "5", "-", "-", "-", "-"]
