"""The pure parts of bench/taskvine_bench.py: TaskVine's transaction log, our counters turned into
bytes moved, the workloads as workflows, the goal's verdict and the table."""

from __future__ import annotations

import dataclasses

from glidein_ext.testbed.vine_compare import (
    MIB,
    OURS,
    TASKVINE,
    Line,
    Moved,
    data_workflow,
    goal,
    median_line,
    ours_moved,
    table,
    taskvine_moved,
    trivial_workflow,
)
from glidein_ext.tq.workflow import parse_workflow

# Lines in the form TaskVine 7.14.5 wrote them (a run of the bench's data workload; time stamps
# and worker ids shortened), and the header.
TRANSACTIONS = """\
# time manager_pid WORKER worker_id CACHE_UPDATE filename size_in_mb wall_time_us start_time_us
# time manager_pid WORKER worker_id TRANSFER (INPUT|OUTPUT) filename size_in_mb wall_time_us
1795838754 22692 WORKER worker-c2 CACHE_UPDATE temp-rnd-hrwwktjxvxymino 10485760 724469 179583875
1795838755 22692 WORKER worker-5a CACHE_UPDATE temp-rnd-dexipnlodlkpdov 10485760 723913 179583875
1795838756 22692 WORKER worker-c2 CACHE_UPDATE temp-rnd-dexipnlodlkpdov 10485760 723913 179583875
1795838757 22692 WORKER worker-aa CACHE_UPDATE temp-rnd-dexipnlodlkpdov 10485760 723913 179583875
1795838758 22692 WORKER worker-5a CACHE_UPDATE buffer-rnd-wuikucqtoorieub 9 234375 1795838756
1795838759 22692 WORKER worker-5a TRANSFER OUTPUT total 9 3600 1795838756674761
1795838760 22692 WORKER worker-5a TRANSFER INPUT script 100 3600 1795838756674761
1795838761 22692 TASK 7 DONE SUCCESS 0 {} {}
"""


def test_taskvine_peer_bytes_are_the_copies_after_a_temps_first_cache_update() -> None:
    moved = taskvine_moved(TRANSACTIONS.splitlines())
    # one temp file copied twice to other workers; the other only where it was produced; the
    # buffer's cache update is not a temp; the transfers both ways are through the manager
    assert moved == Moved(peer=2 * 10 * MIB, centre=109)


def test_taskvine_log_with_odd_lines_counts_nothing_from_them() -> None:
    lines = [
        "",
        "garbage",
        "1 2 WORKER w CACHE_UPDATE temp-x notanumber 0 0",
        "1 2 MANAGER 2 END 5",
    ]
    assert taskvine_moved(lines) == Moved(0, 0)


def test_ours_moved_counts_peer_fetches_se_reads_and_stage_outs() -> None:
    moved = ours_moved({"cache": 3, "host": 5, "peer": 9, "se": 2}, 10, MIB, 7)
    assert moved == Moved(peer=9 * MIB, centre=2 * MIB + 10 * MIB + 7)


def test_the_workloads_are_valid_workflows() -> None:
    trivial = parse_workflow(trivial_workflow("t", 5))
    assert len(trivial.tasks) == 5
    data = data_workflow("d", 10, 3, 4, 1)
    parsed = parse_workflow(data)
    assert len(parsed.tasks) == 13
    merges = [t for t in data["tasks"] if t["name"].startswith("m")]
    # merge 2 wraps round: producers 8, 9, 0, 1
    assert merges[2]["inputs"] == [f"/store/d/p{i}.dat" for i in (8, 9, 0, 1)]
    assert f"head -c {MIB}" in data["tasks"][0]["command"]


def _line(system: str, workload: str, seconds: float, cpu: float, **kw: object) -> Line:
    return Line(system, "x", workload, 100, 0, seconds, cpu, **kw)  # type: ignore[arg-type]


def test_goal_on_trivial_tasks_needs_both_more_tasks_per_second_and_less_cpu() -> None:
    vine = _line(TASKVINE, "trivial", 1.0, 0.05)
    assert goal(_line(OURS, "trivial", 0.5, 0.01), vine) == "met"
    assert goal(_line(OURS, "trivial", 2.0, 0.01), vine) == "MISSED (tasks/s 0.50x)"
    assert goal(_line(OURS, "trivial", 0.5, 0.1), vine) == "MISSED (CPU/task 2.00x)"
    failed = Line(OURS, "x", "trivial", 90, 10, 0.5, 0.01)
    assert goal(failed, vine) == "MISSED (10 tasks failed)"
    assert goal(vine, vine) == "(baseline)"
    assert goal(_line(OURS, "trivial", 0.5, 0.01), None).startswith("-")


def test_goal_on_data_needs_a_shorter_turnaround_and_no_more_through_the_centre() -> None:
    vine = _line(TASKVINE, "data", 4.0, 0.0, moved=Moved(30 * MIB, 0))
    assert goal(_line(OURS, "data", 3.0, 0.0, moved=Moved(30 * MIB, 0)), vine) == "met"
    slow_and_central = _line(OURS, "data", 8.0, 0.0, moved=Moved(0, 100 * MIB))
    assert goal(slow_and_central, vine) == "MISSED (turnaround 2.00x, via centre 100 MiB against 0)"


def test_table_has_a_row_per_line_with_its_verdict() -> None:
    lines = [
        _line(TASKVINE, "trivial", 1.0, 0.05),
        _line(OURS, "trivial", 2.0, 0.2, note="pre-DHT"),
        _line(TASKVINE, "data", 4.0, 0.0, moved=Moved(30 * MIB, 0)),
        _line(OURS, "data", 3.0, 0.0, moved=Moved(20 * MIB, 0)),
    ]
    rows = table(lines).splitlines()
    assert len(rows) == 5 and "ahead of TaskVine" in rows[0]
    assert rows[1].split()[:5] == ["TaskVine", "x", "trivial", "100", "100.0"]
    assert rows[2].endswith("MISSED (tasks/s 0.50x, CPU/task 4.00x)  [pre-DHT]")
    assert rows[3].split()[6:9] == ["4.0", "30", "0"]
    assert rows[4].endswith("met")


def test_a_line_of_several_runs_takes_the_median_of_each_figure() -> None:
    runs = [
        Line(OURS, "pre-dht", "trivial", 2000, 0, seconds, cpu)
        for seconds, cpu in ((4.0, 1.8), (5.0, 1.5), (2.5, 1.7))  # 500, 400, 800 tasks/s
    ]
    line = median_line(runs, "calls")
    assert (line.tasks, line.failed) == (2000, 0)
    assert round(line.rate) == 500
    assert round(line.cpu_ms_per_task, 3) == 0.85  # the median of 0.90, 0.75 and 0.85 ms
    assert line.note == "median of 3 runs: 400-800 tasks/s, 0.75-0.90 ms/task; calls"
    failing = median_line([runs[0], dataclasses.replace(runs[1], failed=3)])
    assert failing.failed == 3  # a run with failed tasks is not hidden by the others
    assert median_line(runs[:1], "calls") == dataclasses.replace(runs[0], note="calls")
