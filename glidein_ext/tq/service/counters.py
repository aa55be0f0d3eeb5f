"""The run's counters (Delgado Peris 2014 §IV): what the architectures are compared by, pure and in
memory.

The Task Queue feeds them as it serves: every pilot request by kind, every workflow's submission
and end, every accepted completion (with the times and input origins the pilot reports), every
round a distributed master reports.  ``snapshot`` gives, overall and per workflow:

- **requests per task by kind**: the pilot requests the TQ received while the workflow ran (from
  its submission to the end of its last task), divided by its tasks; overall, every request
  since the TQ started over every task submitted since (Delgado Peris 2014 §IV.A: "the amount of
  requests received by the Task Queue during a workflow run"); the workflows' requests and those
  received while no workflow ran (``requests_outside_workflows``) add up to the overall;
- **tasks**: submitted; ``tasks_done`` and ``tasks_failed``: tasks that ended so (a task retried
  after a failed attempt counts once); ``attempts``: every accepted completion;
- **inter-task delay**: a pilot's idle time between the end of one task and the start of its next
  one (times reported by the pilot), over pairs of tasks of the same workflow: median, p99, mean
  (Delgado Peris 2014 §IV.A, figure 3);
- **turnaround**: from the submission to the end of the workflow's last task;
- **task time**: how long its tasks took at their pilots (stage-in to stage-out): count, mean,
  standard deviation (what a simulator of the run is given);
- **cache hit ratio**: inputs read from a cache (the pilot's own, a same-host pilot's, a peer's
  through the DHT) over all inputs read; **local hit ratio**: inputs read from the pilot's node
  (its own cache, or a same-host pilot's by hard link) over all (Delgado Peris 2014 §IV.B, figures
  7, 8);
- **rounds and their sum of ranks** (distributed: the master's global rank,
  Delgado Peris 2014 §III.C), and the other assignment method's sum on the same matrices (greedy
  against optimal, same run);
- each distributed site's **masters**: who got the role, with which epoch, when; and the
  **phases** of its masters' rounds: seconds in each (wait, sync, broadcast, replies, solve,
  tq_assign, hand_out, probe), summed over the masters' ``sync`` calls;
- **refused pairs** of the masters' ``assign`` calls, by reason (``task``: no longer queued;
  ``pilot``: not a live idle pilot of the site, or given a task already; ``match``: the
  Requirements, both ways, resources or life do not match).

Only pilot requests count (registration, requests, heartbeats, completions, deregistration, the
master's calls); operators' calls (submit, status, counters) do not.  The counters live in the TQ
process: a restarted TQ starts a new run.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from glidein_ext.tq.client.protocol import API

ORIGINS = ("cache", "host", "peer", "se")
CACHED = ("cache", "host", "peer")
LOCAL = ("cache", "host")
MAX_PHASES = 16  # round phase names kept per site
MAX_SITES = 1000  # sites whose masters and phases are kept; the longest unheard of leaves first

# The pilots' and masters' calls, by kind, with their method (Delgado Peris 2014 §IV.A counts them).
PILOT_CALLS = {
    "register": "POST",
    "request": "POST",
    "heartbeat": "POST",
    "complete": "POST",
    "complete-and-request": "POST",  # a busy pilot's one call per task: one request
    "reports": "POST",  # several pilots' complete-and-request in one request: one request
    "deregister": "DELETE",
    "claim": "POST",
    "sync": "POST",
    "assign": "POST",
}


def request_kind(method: str, path: str) -> str | None:
    """The kind of a pilot's request (``register``, ``request``, ... ``assign``), or None for
    anything else (operators' calls, health checks, a path with an empty pilot or site)."""
    kind = call_kind(method, path)
    if PILOT_CALLS.get(kind) != method or "//" in path:
        return None
    return kind


_PILOT_VERBS = {
    "request": "request",
    "heartbeat": "heartbeat",
    "complete": "complete",
    "complete-and-request": "complete-and-request",
}
_SITE_VERBS = {"master": "claim", "sync": "sync", "assign": "assign"}


_CALLS = API + "/"  # every call of the API but /metrics and /healthz


def call_kind(method: str, path: str) -> str:
    """A request's kind for the metrics: the pilot protocol's calls (``register``, ``request``,
    ``heartbeat``, ``complete``, ``complete-and-request``, ``reports``, ``deregister``), the
    master's (``claim``, ``sync``, ``assign``), the operators' (``submit``, ``status``,
    ``tasks``, ...), ``metrics``,
    ``healthz``, else ``other``.  A few string operations, no regular expression."""
    if not path.startswith(_CALLS):
        if path == "/metrics":
            return "metrics"
        if path == "/healthz":
            return "healthz"
        return "other"
    parts = path[len(_CALLS) :].split("/")
    head = parts[0]
    if head == "pilots":
        if len(parts) == 1 or (len(parts) == 2 and not parts[1]):
            return "register" if method == "POST" else "other"
        if len(parts) == 2:
            if method == "POST" and parts[1] == "reports":
                return "reports"
            return "deregister" if method == "DELETE" else "other"
        if len(parts) == 3:
            return _PILOT_VERBS.get(parts[2], "other")
        return "other"
    if head == "sites" and len(parts) == 3:
        return _SITE_VERBS.get(parts[2], "other")
    if head == "workflows":
        return "submit" if method == "POST" else "workflows"
    if head in ("status", "counters", "sites", "tasks", "warnings", "masters", "credentials"):
        return head
    return "other"


def percentile(sorted_values: Sequence[float], fraction: float) -> float | None:
    """The nearest-rank percentile of already sorted values; None when there are none."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass
class _Tally:
    """What is summed for one workflow, or for the whole run."""

    # by kind; fractional while workflows overlap (shared, see RunCounters.on_request)
    requests: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    origins: Counter[str] = field(default_factory=Counter)
    done: int = 0  # tasks ended done (a task retried after a failed attempt counts once)
    failed: int = 0  # tasks ended failed for good
    attempts: int = 0  # accepted completions, every attempt
    rounds: int = 0
    rank_sum: float = 0.0
    served: int = 0
    compared_sum: float = 0.0
    compared_served: int = 0
    refused: Counter[str] = field(default_factory=Counter)

    def add_round(self, rank_sum: float, served: int, compared: tuple[float, int]) -> None:
        self.rounds += 1
        self.rank_sum += rank_sum
        self.served += served
        self.compared_sum += compared[0]
        self.compared_served += compared[1]

    def metrics(self, tasks: int, gaps: list[float]) -> dict[str, Any]:
        """The derived values; ``gaps`` are the inter-task delays, sorted."""
        total = sum(self.requests.values())
        inputs = sum(self.origins[o] for o in ORIGINS)
        return {
            "tasks": tasks,
            "tasks_done": self.done,
            "tasks_failed": self.failed,
            "attempts": self.attempts,
            "requests": {kind: _count(n) for kind, n in sorted(self.requests.items())},
            "requests_total": _count(total),
            "requests_per_task": total / tasks if tasks else None,
            "inter_task_delay": {
                "n": len(gaps),
                "median": percentile(gaps, 0.5),
                "p99": percentile(gaps, 0.99),
                "mean": sum(gaps) / len(gaps) if gaps else None,
            },
            "inputs": {o: self.origins[o] for o in ORIGINS},
            "cache_hit_ratio": sum(self.origins[o] for o in CACHED) / inputs if inputs else None,
            "local_hit_ratio": sum(self.origins[o] for o in LOCAL) / inputs if inputs else None,
            "rounds": {
                "n": self.rounds,
                "rank_sum": self.rank_sum,
                "served": self.served,
                "compared_sum": self.compared_sum,
                "compared_served": self.compared_served,
                "refused": dict(sorted(self.refused.items())),
            },
        }


@dataclass
class _Run:
    """One workflow's window: from its submission to the end of its last task."""

    workflow_id: int
    name: str
    tasks: int
    submitted_at: float
    finished_at: float | None = None
    tally: _Tally = field(default_factory=_Tally)
    # pilot -> (started, ended) of its tasks in this workflow
    spans: dict[int, list[tuple[float, float]]] = field(default_factory=dict)


class RunCounters:
    """The counters of one Task Queue run; safe to feed from several threads."""

    def __init__(self, now: float = 0.0) -> None:
        self.started_at = now
        self._lock = threading.Lock()
        self._overall = _Tally()
        self._submitted = 0  # tasks of the workflows submitted in this run
        self._outside: defaultdict[str, float] = defaultdict(float)  # while no workflow ran
        self._runs: dict[int, _Run] = {}
        self._open: dict[int, _Run] = {}
        self._masters: dict[str, list[dict[str, Any]]] = {}
        self._phases: dict[str, dict[str, float]] = {}  # site: phase: seconds

    def on_request(self, kind: str) -> None:
        """A pilot request arrived (see :func:`request_kind`).  While several workflows run, it
        is shared equally among them (the request does not say whose task it concerns), so the
        workflows' counts add up to the overall count instead of counting it once for each."""
        with self._lock:
            self._overall.requests[kind] += 1
            if not self._open:
                self._outside[kind] += 1
            else:
                share = 1 / len(self._open) if len(self._open) > 1 else 1
                for run in self._open.values():
                    run.tally.requests[kind] += share

    def on_submit(self, workflow_id: int, name: str, tasks: int, now: float) -> None:
        with self._lock:
            self._submitted += tasks
            run = _Run(workflow_id, name, tasks, now)
            self._runs[workflow_id] = run
            self._open[workflow_id] = run

    def on_finish(self, workflow_id: int, now: float) -> None:
        """The workflow's last task ended (done or failed for good)."""
        with self._lock:
            run = self._open.pop(workflow_id, None)
            if run is not None:
                run.finished_at = now

    def on_completion(
        self,
        workflow_id: int,
        pilot_id: int,
        started_at: float | None,
        ended_at: float | None,
        origins: Mapping[str, int],
        outcome: str = "done",
    ) -> None:
        """An accepted completion (once per task attempt); ``outcome``: the task's state after
        it, ``done``, ``failed`` (for good) or ``retried`` (queued again): the tasks are counted
        by how they ended, the attempts apart."""
        counted = {o: int(n) for o, n in origins.items() if o in ORIGINS and int(n) > 0}
        with self._lock:
            tallies = [self._overall]
            run = self._runs.get(workflow_id)
            if run is not None:
                tallies.append(run.tally)
            for tally in tallies:
                tally.attempts += 1
                tally.done += outcome == "done"
                tally.failed += outcome == "failed"
                tally.origins.update(counted)
            if run is None:
                return
            if started_at is not None and ended_at is not None and ended_at >= started_at:
                run.spans.setdefault(pilot_id, []).append((started_at, ended_at))

    def on_round(
        self, rank_sum: float, served: int, compared: tuple[float, int] = (0.0, 0)
    ) -> None:
        """A distributed master's round (Delgado Peris 2014 §III.C): the sum of the ranks it
        assigned and the pilots served, and (``compared``) the other method's on the same rank
        matrix."""
        with self._lock:
            self._overall.add_round(rank_sum, served, compared)
            for run in self._open.values():
                run.tally.add_round(rank_sum, served, compared)

    def on_refused(self, reason: str) -> None:
        """A distributed master's pair the Task Queue refused (``reason``: task, pilot, match)."""
        with self._lock:
            self._overall.refused[reason] += 1
            for run in self._open.values():
                run.tally.refused[reason] += 1

    def on_master(self, site: str, pilot_id: int, epoch: int, now: float) -> None:
        """A pilot got a distributed site's master role (Delgado Peris 2014 §III.B)."""
        with self._lock:
            grants = _recent(self._masters, site, list)
            grants.append({"pilot_id": pilot_id, "epoch": epoch, "at": now})
            del grants[:-100]

    def on_phases(self, site: str, phases: Iterable[tuple[str, float]]) -> None:
        """A distributed master's round phases since its last sync, seconds each (at most
        ``MAX_PHASES`` names kept per site)."""
        with self._lock:
            totals = _recent(self._phases, site, dict)
            for phase, seconds in phases:
                if phase in totals or len(totals) < MAX_PHASES:
                    totals[phase] = totals.get(phase, 0.0) + max(0.0, float(seconds))

    def snapshot(self, now: float) -> dict[str, Any]:
        """Everything, JSON-ready: ``overall`` and one entry per workflow."""
        with self._lock:
            workflows = []
            every_gap: list[float] = []
            for run in self._runs.values():
                gaps = sorted(gap for spans in run.spans.values() for gap in idle_gaps(spans))
                every_gap.extend(gaps)
                metrics = run.tally.metrics(run.tasks, gaps)
                end = run.finished_at
                metrics.update(
                    id=run.workflow_id,
                    name=run.name,
                    task_time=span_stats(span for spans in run.spans.values() for span in spans),
                    submitted_at=run.submitted_at,
                    finished_at=end,
                    turnaround=None if end is None else end - run.submitted_at,
                )
                workflows.append(metrics)
            overall = self._overall.metrics(self._submitted, sorted(every_gap))
            outside = {kind: _count(n) for kind, n in sorted(self._outside.items())}
            overall.update(
                started_at=self.started_at,
                uptime=now - self.started_at,
                requests_outside_workflows=outside,
            )
            masters = {site: list(grants) for site, grants in self._masters.items()}
            phases = {
                site: {p: round(v, 3) for p, v in totals.items()}
                for site, totals in self._phases.items()
            }
            return {
                "overall": overall,
                "workflows": workflows,
                "masters": masters,
                "phases": phases,
            }


V = TypeVar("V")


def _recent(by_site: dict[str, V], site: str, new: Callable[[], V]) -> V:
    """``by_site[site]``, made the most recent entry (created if need be); the least recent
    entries leave beyond ``MAX_SITES``, so names pilots bring cannot grow it without bound."""
    value = by_site.pop(site) if site in by_site else new()
    by_site[site] = value
    while len(by_site) > MAX_SITES:
        del by_site[next(iter(by_site))]
    return value


def _count(n: float) -> float:
    """A request count as shown: whole when it is (shares of overlapping workflows are not)."""
    return int(n) if float(n).is_integer() else round(n, 3)


def span_stats(spans: Iterable[tuple[float, float]]) -> dict[str, float | int | None]:
    """How long the workflow's tasks took at their pilots (stage-in and stage-out included):
    count, mean and standard deviation in seconds (a simulator of the run takes these)."""
    times = [end - start for start, end in spans]
    if not times:
        return {"n": 0, "mean": None, "sd": None}
    mean = sum(times) / len(times)
    sd = math.sqrt(sum((t - mean) ** 2 for t in times) / len(times))
    return {"n": len(times), "mean": mean, "sd": sd}


def idle_gaps(spans: Iterable[tuple[float, float]]) -> list[float]:
    """A pilot's idle times between consecutive tasks, from its (start, end) spans in any order
    (a master reports in bulk).  Overlapping spans (a pilot with several slots) count 0."""
    ordered = sorted(spans)
    return [max(0.0, ordered[i + 1][0] - ordered[i][1]) for i in range(len(ordered) - 1)]
