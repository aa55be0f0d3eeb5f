"""The three architectures of Delgado Peris 2014 (section IV) with real processes on 127.0.0.1: a
site of 200 pilots over 8 processes runs W1, W2 and W3 with real files in each; the Task Queue's
counters give the table (requests per task, inter-task delay, hit ratios).  It asserts what the
distributed architecture is for: far fewer requests per task than either pull architecture (the
paper: 12, 9, 5), at most 1.5 per task, and a high cache hit ratio.  Between pre-DHT and
centralized the paper's gap is small, and here it is smaller still (2.6 against 3.4 per task on a
quiet machine); on a loaded machine the centralized pilots' empty requests grow (3.7 to 4.2
against pre-DHT's 2.9 to 3.3 seen, with two full test runs at once), so the test leaves the
ordering of the two pull architectures to ``glidein-ext experiment dht-scaling`` and
``bench/architectures_bench.py``.  The distributed workers publish their cache in the background
while their completion is reported, so a task started at once may read a file from the SE: under
load the cache hit ratio falls a little (0.89 seen), hence 0.85 there.  The Task Queue keeps its
default master timeout (a minute): with 6 s, on a loaded CI machine the master found a third of
its busy worker processes dead (0.83 cache hit, twice the turnaround).

The first pilot runs alone in its process (it is the distributed site's master; on a real site
every pilot is a process of its own).  A few minutes on the 2-core development machine;
``bench/architectures_bench.py`` prints the same tables at a larger size, with greedy against
optimal.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from glidein_ext.testbed.site_runs import Row, SiteRun, row, table

# CPU-heavy: runs in one xdist worker with the other heavy tests (tests/conftest.py).
pytestmark = pytest.mark.heavy

PILOTS = 200
PROCESSES = 8
SCALE = 2.5  # W1: 200 + 200 tasks, W2: 100 + 200, W3: 200 + 100
WORKFLOWS = ("w1", "w2", "w3")
ARCHITECTURES = ("pre-dht", "centralized", "distributed")


def _run(directory: Path, architecture: str) -> list[Row]:
    with SiteRun(
        directory,
        architecture,
        PILOTS,
        processes=PROCESSES,
        first_alone=True,  # as on a real site, the first pilot (the master) has its own process
        pilot_args=("--round-period", "1"),
    ) as site:
        rows = [row(architecture, site.run_workflow(kind, SCALE, sleep=0.5)) for kind in WORKFLOWS]
        produced = list((site.se_dir / "store").rglob("*.dat"))
    assert len(produced) == sum(r.tasks for r in rows)  # every task wrote its real file
    return rows


def test_the_distributed_architecture_asks_the_task_queue_least(
    tmp_path: Path,
) -> None:
    rows = [r for arch in ARCHITECTURES for r in _run(tmp_path / arch, arch)]
    shown = table(rows)
    print(f"\n{PILOTS} pilots in {PROCESSES} processes, W1/W2/W3 at scale {SCALE}\n{shown}")
    by = {(r.architecture, r.workflow): r for r in rows}
    for kind in WORKFLOWS:
        pre, central, distributed = (by[(arch, kind)] for arch in ARCHITECTURES)
        fewest = min(pre.requests_per_task, central.requests_per_task)
        assert distributed.requests_per_task < fewest, shown
        assert distributed.requests_per_task <= 1.5, shown
        assert distributed.cache_hit is not None and distributed.cache_hit >= 0.85, shown
        assert central.cache_hit is not None and central.cache_hit >= 0.9, shown
