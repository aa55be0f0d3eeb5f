"""A site of real pilots on 127.0.0.1 running the paper's workflows (Delgado Peris 2014 §IV), for
the architectures test and benchmark.

``SiteRun`` starts ``tq serve --architecture A`` (a ``TqServer``) and ``processes`` pilot
processes of ``glidein-ext pilot run --pilots N`` (a ``LocalSite`` of the demos, each pilot a host
of its own; several pilots per process share one event loop, each task a real subprocess writing
real files), waits until every pilot registered, then runs workflows
one at a time (``run_workflow``: submit, wait until every task ended) and reads the Task Queue's
counters.  ``first_alone`` starts one pilot in a process of its own before the others: it
registers first, so it is the master of a distributed site (the master-kill test kills it).
``sites``: the sites the processes belong to, in turn (one Task Queue, one SE for all);
``with_se=False``: pilots without an SE (outputs stay in their caches, inputs come from them).
``rows`` and ``table`` turn counters into the comparison table.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glidein_ext.demos.local_site import LocalSite, wait_workflow, workflow_counters
from glidein_ext.demos.table import Column, counter_cell, text_table
from glidein_ext.procs import Running
from glidein_ext.testbed.tq_server import TqServer, settings_env
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.workflow import generate

SITE = "T2_XX_Test"


@dataclass
class SiteRun(Running):
    """One site of ``pilots`` pilots over ``processes`` processes, one architecture."""

    directory: Path
    architecture: str
    pilots: int
    processes: int = 4
    pilot_args: Sequence[str] = ()
    tq_args: Sequence[str] = ()
    tq_settings: Mapping[str, str] = field(default_factory=dict)  # $GLIDEIN_EXT_TQ_<NAME>
    first_alone: bool = False
    sites: Sequence[str] = (SITE,)
    register_timeout: float = 120.0
    with_se: bool = True
    verbose: bool = True  # the pilots log each task's start (LocalSite.verbose)
    server: TqServer | None = None
    local_site: LocalSite | None = None

    @property
    def procs(self) -> list[subprocess.Popen[bytes]]:
        """The pilot processes (none before ``start``)."""
        return [] if self.local_site is None else self.local_site.procs

    @property
    def se_dir(self) -> Path:
        assert self.local_site is not None
        return self.local_site.se_dir

    @property
    def operator(self) -> TqClient:
        assert self.server is not None
        return self.server.operator(timeout=60)

    def start(self) -> SiteRun:
        shutil.rmtree(self.directory, ignore_errors=True)
        self.server = TqServer(
            self.directory / "tq",
            args=["--architecture", self.architecture, *self.tq_args],
            # Pilots heartbeat once a minute, as for long jobs: the runs compare the requests
            # each architecture makes per task, not a heartbeat that falls in one run or not.
            heartbeat_interval="60",
            heartbeat_timeout="300",
            env=settings_env(self.tq_settings),
        ).start()
        self.local_site = LocalSite(
            self.server,
            self.directory,
            self._split(),
            self.sites,
            self.pilot_args,
            shared_caches=False,
            master_first=self.first_alone,
            with_se=self.with_se,
            register_timeout=self.register_timeout,
            kill_after=30,
            explain=self.logs,
            verbose=self.verbose,
        )
        try:
            self.local_site.start()
        except BaseException:
            self.server.stop()
            raise
        return self

    def _split(self) -> list[int]:
        rest = self.pilots - (1 if self.first_alone else 0)
        per = [rest // self.processes + (i < rest % self.processes) for i in range(self.processes)]
        return ([1] if self.first_alone else []) + [n for n in per if n]

    def logs(self, tail: int = 3000) -> str:
        texts = [
            p.read_text(errors="replace")[-tail:] for p in sorted(self.directory.glob("*.log"))
        ]
        assert self.server is not None
        return "\n".join([*texts, self.server.log()[-tail:]])

    def unfinished(self, workflow_id: int, lines: int = 40) -> str:
        """For a test that timed out: the workflow's tasks not done (state, attempt, pilot, from
        the Task Queue's SQLite file) and the last ``lines`` log lines, of every log, that name
        one of them."""
        assert self.server is not None
        with contextlib.closing(sqlite3.connect(self.server.database)) as db:
            rows = db.execute(
                "SELECT id, name, state, attempt, pilot_id FROM tasks"
                " WHERE workflow_id = ? AND state != 'done' ORDER BY id",
                (workflow_id,),
            ).fetchall()
        if not rows:
            return "every task done"
        ids = "|".join(str(row[0]) for row in rows[:50])
        named = re.compile(rf"\btasks? ({ids})\b")
        logs = [*sorted(self.directory.glob("*.log")), self.server.log_path]
        mentions = [
            f"{path.name}: {line}"
            for path in logs
            for line in path.read_text(errors="replace").splitlines()
            if named.search(line)
        ]
        head = [
            f"task {i} {name}: {state}, attempt {a}, pilot {p}" for i, name, state, a, p in rows
        ]
        return "\n".join([*head, *mentions[-lines:]])

    def run_workflow(
        self,
        kind: str,
        scale: float,
        sleep: float = 0.5,
        size: int = 0,
        timeout: float = 300,
        max_retries: int | None = None,
        rank: str | None = None,
        shape: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Submit W1/W2/W3, wait until all its tasks ended; its counters.  ``max_retries``: the
        workflow's default (the Task Queue's, 2, if None); ``rank``: the tasks' Rank;
        ``shape``: edits the generated workflow before it is submitted."""
        submitted = generate(kind, scale, size, sleep)
        if shape is not None:
            shape(submitted)
        if max_retries is not None:
            submitted["defaults"]["max_retries"] = max_retries
        if rank is not None:
            submitted["defaults"]["rank"] = rank
        answer = self.operator.submit(submitted)
        wait_workflow(
            self.operator,
            answer.workflow_id,
            kind,
            timeout,
            0.3,
            lambda counts: None,
            lambda: f"\n{self.logs()}\n{self.unfinished(answer.workflow_id)}",
        )
        return self.workflow_counters(answer.workflow_id)

    def workflow_counters(self, workflow_id: int) -> dict[str, Any]:
        return workflow_counters(self.operator, workflow_id)

    def stop(self) -> None:
        if self.local_site is not None:
            self.local_site.stop()
        if self.server is not None:
            self.server.stop()


@dataclass(frozen=True)
class Row:
    """One line of the comparison table."""

    architecture: str
    workflow: str
    tasks: int
    requests_per_task: float
    kinds: dict[str, int]
    delay_median: float | None
    delay_p99: float | None
    cache_hit: float | None
    local_hit: float | None
    turnaround: float | None
    rank_sum: float
    compared_sum: float  # the other assignment method on the same rank matrices
    served: int
    compared_served: int


def row(architecture: str, counters: dict[str, Any]) -> Row:
    delay = counters["inter_task_delay"]
    return Row(
        architecture,
        counters["name"],
        counters["tasks"],
        counters["requests_per_task"],
        counters["requests"],
        delay["median"],
        delay["p99"],
        counters["cache_hit_ratio"],
        counters["local_hit_ratio"],
        counters["turnaround"],
        counters["rounds"]["rank_sum"],
        counters["rounds"]["compared_sum"],
        counters["rounds"]["served"],
        counters["rounds"]["compared_served"],
    )


# The comparison table's columns (Delgado Peris 2014 Fig. 5/6), the requests by kind last.
ROW_COLUMNS: tuple[Column[Row], ...] = (
    Column("architecture", "<12", lambda r: r.architecture),
    Column("wf", "<3", lambda r: r.workflow),
    Column("tasks", ">5", lambda r: r.tasks),
    Column("req/task", ">8", lambda r: f"{r.requests_per_task:.2f}"),
    Column("delay p50", ">9", lambda r: counter_cell(r.delay_median)),
    Column("delay p99", ">9", lambda r: counter_cell(r.delay_p99)),
    Column("cache hit", ">9", lambda r: counter_cell(r.cache_hit)),
    Column("local hit", ">9", lambda r: counter_cell(r.local_hit)),
    Column("turnaround", ">10", lambda r: counter_cell(r.turnaround, 1)),
    Column(
        "requests by kind",
        "",
        lambda r: " ".join(f"{k}={v}" for k, v in sorted(r.kinds.items())),
        gap="  ",
    ),
)


def table(rows: Sequence[Row]) -> str:
    """The comparison table, one line per (architecture, workflow)."""
    return text_table(ROW_COLUMNS, rows)
