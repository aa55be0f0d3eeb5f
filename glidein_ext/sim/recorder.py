"""What a simulated run measures: the real system's counters (``tq.service.counters.RunCounters``,
fed as
the Task Queue feeds them) and the time series the papers plot (Delgado Peris 2014 figures 5 and 6:
slot
occupancy, cumulative requests, inter-task delay and the Task Queue's queue; Hasham 2011 figure 7:
running jobs; figure 8: stage-in times), pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from glidein_ext.tq.service.counters import RunCounters

WORKFLOW_ID = 1


@dataclass
class Recorder:
    """Fed by the simulated Task Queue, pilots and master; read by ``summary``."""

    counters: RunCounters = field(default_factory=RunCounters)
    submitted_at: float | None = None
    finished_at: float | None = None
    running: int = 0
    running_series: list[tuple[float, int]] = field(default_factory=list)
    request_times: list[float] = field(default_factory=list)
    queue_series: list[tuple[float, int]] = field(default_factory=list)
    gap_series: list[tuple[float, float]] = field(default_factory=list)  # (at, delay)
    stage_in: list[float] = field(default_factory=list)  # seconds per successful attempt
    first_starts: dict[int, float] = field(default_factory=dict)  # pilot -> its first start
    failures: int = 0
    _last_end: dict[int, float] = field(default_factory=dict)

    def submit(self, tasks: int, now: float) -> None:
        self.submitted_at = now
        self.counters.on_submit(WORKFLOW_ID, "workflow", tasks, now)

    def finish(self, now: float) -> None:
        self.finished_at = now
        self.counters.on_finish(WORKFLOW_ID, now)

    def request(self, kind: str, now: float, queue: int) -> None:
        """A pilot's request reached the Task Queue, which had ``queue`` requests waiting."""
        self.counters.on_request(kind)
        if self.submitted_at is not None and self.finished_at is None:
            self.request_times.append(now)
            self.queue_series.append((now, queue))

    def started(self, pilot_id: int, now: float) -> None:
        """A task attempt started on a pilot (stage-in included, as the real pilot reports)."""
        self.running += 1
        self.running_series.append((now, self.running))
        self.first_starts.setdefault(pilot_id, now)
        last = self._last_end.get(pilot_id)
        if last is not None:
            self.gap_series.append((now, now - last))

    def ended(self, pilot_id: int, now: float, ok: bool) -> None:
        """A task attempt ended on a pilot."""
        self.running -= 1
        self.running_series.append((now, self.running))
        self._last_end[pilot_id] = now
        if not ok:
            self.failures += 1

    def accepted(
        self, pilot_id: int, started: float, ended: float, origins: dict[str, int], ok: bool = True
    ) -> None:
        """The Task Queue accepted a completion (``origins``: where the task's inputs came from,
        as the pilot reports them; the times are the pilot's; not ``ok``: queued again)."""
        outcome = "done" if ok else "retried"
        self.counters.on_completion(WORKFLOW_ID, pilot_id, started, ended, origins, outcome)

    def round(self, rank_sum: float, served: int) -> None:
        self.counters.on_round(rank_sum, served)

    def first_burst(self, expected: int) -> float | None:
        """Seconds from the submission until ``expected`` pilots had started their first task
        (Delgado Peris 2014 §IV.A: the time the Task Queue takes to serve the first burst)."""
        if self.submitted_at is None or expected <= 0 or len(self.first_starts) < expected:
            return None
        starts = sorted(self.first_starts.values())
        return starts[expected - 1] - self.submitted_at

    def summary(self, expected_first: int) -> dict[str, Any]:
        """One row: the counters' workflow metrics plus the simulator's own."""
        snapshot = self.counters.snapshot(self.finished_at or 0.0)
        (workflow,) = snapshot["workflows"]
        delay = workflow["inter_task_delay"]
        stage = sorted(self.stage_in)
        return {
            "tasks": workflow["tasks"],
            "tasks_done": workflow["tasks_done"],
            "requests": workflow["requests_total"],
            "requests_per_task": workflow["requests_per_task"],
            "requests_by_kind": workflow["requests"],
            "delay_median": delay["median"],
            "delay_p99": delay["p99"],
            "delay_mean": delay["mean"],
            "cache_hit": workflow["cache_hit_ratio"],
            "local_hit": workflow["local_hit_ratio"],
            "turnaround": workflow["turnaround"],
            "first_burst": self.first_burst(expected_first),
            "stage_in_mean": sum(stage) / len(stage) if stage else math.nan,
            "failures": self.failures,
            "rounds": workflow["rounds"]["n"],
            "rank_sum": workflow["rounds"]["rank_sum"],
            "queue_max": max((q for _, q in self.queue_series), default=0),
        }
