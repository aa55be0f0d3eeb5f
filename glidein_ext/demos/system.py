"""The main demo: the whole system on the embedded default, narrated, in a few minutes.

Scene 1 (Hasham 2011 and 000): a Task Queue on SQLite and a site of pilots on three simulated
worker nodes, every pilot joining the site's DHT and sharing its host's cache; Hasham 2011's W1
workflow (a chain: each step-1 task reads the file its step-0 task wrote) with real files on a
local storage element, run once with the pre-DHT Task Queue and once with the distributed
architecture (a master pilot schedules the site in rounds); a live progress line; then the table
Delgado Peris 2014 Fig. 5/6 compare: TQ requests per task, inter-task delay, cache and local hit
ratios.
Scene 2 (Sfiligoi 2013): the handshake demo in the real HTCondor pool -- a glidein with user jobs,
the site vacates it through ``.site.ad``, it drains without losing work and leaves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glidein_ext.demos.local_site import LocalSite, LocalTaskQueue, wait_workflow, workflow_counters
from glidein_ext.demos.table import Column, counter_cell, text_table
from glidein_ext.errors import GlideinExtError
from glidein_ext.tq.workflow import generate

# How each architecture's pilots find work and files (Delgado Peris 2014 §III).
HOW = {
    "pre-dht": "each asks the Task Queue for work and the Task Queue tracks every cache",
    "centralized": "they join the site DHT, share caches through it, and each asks the Task Queue",
    "distributed": "they join the site DHT, share caches through it, and a master pilot asks "
    "the Task Queue for the whole site in rounds",
}

# What the paper measured (Delgado Peris 2014 §IV, Fig. 5/6): TQ requests per task.
PAPER_REQUESTS_PER_TASK = {"pre-dht": 12.0, "centralized": 9.0, "distributed": 5.0}


@dataclass(frozen=True)
class DemoSize:
    """How big scene 1 is: the defaults take about a minute per architecture on 2 cores."""

    hosts: int = 3
    pilots_per_host: int = 4
    scale: float = 0.5  # W1 at 0.5: 40 chains, 80 tasks
    sleep: float = 2.0  # seconds each task runs
    size: int = 200_000  # bytes each task writes
    timeout: float = 300.0


@dataclass(frozen=True)
class ArchitectureResult:
    """One architecture's W1 run, from the Task Queue's counters."""

    architecture: str
    tasks: int
    done: int
    failed: int
    requests_per_task: float | None
    delay_median: float | None
    cache_hit: float | None
    local_hit: float | None
    turnaround: float | None
    files: int

    @classmethod
    def of(
        cls, architecture: str, counts: dict[str, int], counters: dict[str, Any], files: int
    ) -> ArchitectureResult:
        return cls(
            architecture,
            int(counters["tasks"]),
            counts.get("done", 0),
            counts.get("failed", 0),
            counters.get("requests_per_task"),
            counters["inter_task_delay"].get("median"),
            counters.get("cache_hit_ratio"),
            counters.get("local_hit_ratio"),
            counters.get("turnaround"),
            files,
        )


def progress_line(name: str, counts: dict[str, int], elapsed: float, width: int = 30) -> str:
    """``W1 [#########.....] 23/40 done, 8 running, 9 waiting  12 s``."""
    total = sum(counts.values())
    done = counts.get("done", 0) + counts.get("failed", 0)
    filled = round(width * done / total) if total else 0
    running = counts.get("running", 0) + counts.get("assigned", 0)
    waiting = total - done - running
    return (
        f"   {name} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} done, "
        f"{running} running, {waiting} waiting  {elapsed:.0f} s"
    )


# The final table's columns: the paper's value beside ours (Delgado Peris 2014 Fig. 5/6).
RESULT_COLUMNS: tuple[Column[ArchitectureResult], ...] = (
    Column("architecture", "<12", lambda r: r.architecture),
    Column("tasks", ">5", lambda r: r.tasks),
    Column("failed", ">6", lambda r: r.failed),
    Column("TQ req/task", ">11", lambda r: counter_cell(r.requests_per_task)),
    Column("(paper)", ">7", lambda r: f"{PAPER_REQUESTS_PER_TASK[r.architecture]:.0f}"),
    Column("delay p50 s", ">11", lambda r: counter_cell(r.delay_median)),
    Column("cache hit", ">9", lambda r: counter_cell(r.cache_hit)),
    Column("local hit", ">9", lambda r: counter_cell(r.local_hit)),
    Column("turnaround s", ">12", lambda r: counter_cell(r.turnaround, 1)),
)


def results_table(results: list[ArchitectureResult]) -> str:
    """The final table, one line per architecture, the paper's value beside ours."""
    return text_table(RESULT_COLUMNS, results, indent="   ")


def run_architecture(
    directory: Path,
    architecture: str,
    size: DemoSize,
    say: Callable[[str], None],
    progress: Callable[[str], None],
) -> ArchitectureResult:
    """One Task Queue, one site of pilots, one W1 workflow to its end; the counters."""
    with LocalTaskQueue(directory / "tq", architecture) as tq:
        say(f"   Task Queue on SQLite at {tq.url} (architecture {architecture}).")
        with LocalSite(
            tq,
            directory / "site",
            hosts=(size.pilots_per_host,) * size.hosts,
            pilot_args=("--round-period", "1"),
        ) as site:
            say(
                f"   {site.pilots} pilots on {size.hosts} worker nodes registered; "
                f"{HOW[architecture]}."
            )
            workflow = generate("w1", size.scale, size.size, size.sleep)
            answer = tq.operator().submit(workflow)
            say(f"   W1 submitted: {answer.tasks} tasks ({size.size // 1000} kB files).")
            started = time.monotonic()
            counts = wait_workflow(
                tq.operator(),
                answer.workflow_id,
                "W1",
                size.timeout,
                0.5,
                lambda now: progress(progress_line("W1", now, time.monotonic() - started)),
                lambda: f"(logs in {directory})",
            )
            progress("")
            counters = workflow_counters(tq.operator(), answer.workflow_id)
            files = len(list((site.se_dir / "store").rglob("*.dat")))
            masters = tq.operator().call("GET", "/api/v1/counters").get("masters", {})
            (site_name,) = site.sites
            if architecture == "distributed" and masters.get(site_name):
                grant = masters[site_name][-1]
                say(f"   The site's master was pilot {grant['pilot_id']} (epoch {grant['epoch']}).")
        say(
            "   The pilots got SIGTERM: each finished, left the site (DHT keys handed on) "
            "and deregistered."
        )
    return ArchitectureResult.of(architecture, counts, counters, files)


def run_workflow_scene(
    directory: Path,
    say: Callable[[str], None],
    progress: Callable[[str], None],
    size: DemoSize = DemoSize(),
    architectures: tuple[str, ...] = ("pre-dht", "distributed"),
) -> list[ArchitectureResult]:
    """Scene 1: W1 through each architecture; prints and returns the table's rows."""
    results = []
    for number, architecture in enumerate(architectures, start=1):
        say(f"1.{number} W1 with the {architecture} Task Queue (Delgado Peris 2014 §III).")
        results.append(
            run_architecture(directory / architecture, architecture, size, say, progress)
        )
    say("   The Task Queue's counters (Delgado Peris 2014 Fig. 5/6; the paper's values beside):")
    say(results_table(results))
    for r in results:
        if r.failed or r.done != r.tasks or r.files != r.tasks:
            raise GlideinExtError(
                f"{r.architecture}: {r.done} of {r.tasks} tasks done, {r.failed} failed, "
                f"{r.files} files on the SE"
            )
    return results


def run_system_demo(
    directory: Path,
    say: Callable[[str], None],
    progress: Callable[[str], None],
    keep_pool: bool = False,
    with_pool: bool = True,
) -> list[ArchitectureResult]:
    """Both scenes; ``with_pool=False`` runs scene 1 only (no HTCondor, no root)."""
    say("Scene 1: a Task Queue, a site of pilots sharing caches through the site DHT, W1.")
    results = run_workflow_scene(directory, say, progress)
    if with_pool:
        from glidein_ext.demos.handshake import run_handshake_demo

        say("")
        say("Scene 2: the site vacates a glidein through .site.ad; it drains and leaves.")
        run_handshake_demo(say, keep_pool=keep_pool)
    return results
