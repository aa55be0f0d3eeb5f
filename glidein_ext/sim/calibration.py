"""How long the real cores take, measured at start-up: the cost model behind the simulated Task
Queue's service time, the workers' ranking and the master's assignment.

The simulator calls the real cores for every decision (which task, which pilot), and charges
simulated time from the work they did, through a linear model fitted here to timings of the same
cores on this machine:

- the Task Queue's matcher (``tq.service.matching.matcher.Matcher.choose``): ``match_base`` per
  request, ``per_eval`` per classad2 evaluation (a task group the pilot has not met yet),
  ``per_group`` per group looked at, ``per_cached`` per file of the pilot's cache (the locality
  pass);
- a worker's ranking (``sched.ranking.Ranker.rank``): ``rank_per_task`` per TaskList entry;
- the master's assignment (``sched.assign``): ``assign_base`` plus ``assign_per_pair`` per
  allowed pair of the rank matrix.

Charging a model of the work done, rather than the wall time of each call, keeps a run
deterministic for a seed (the same calibration gives the same run); :data:`REFERENCE` is one
calibration of the development machine, for tests and quick runs.
"""

from __future__ import annotations

import functools
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from glidein_ext.sched.assign import assign
from glidein_ext.sched.matrix import RankMatrix
from glidein_ext.sched.ranking import InputFile, Ranker, TaskEntry, TaskSpec, WorkerAd, WorkerState
from glidein_ext.tq.models import MatchSpec, PilotInfo, QueuedTask
from glidein_ext.tq.service.matching.matcher import Matcher


@dataclass(frozen=True)
class CostModel:
    """Seconds per unit of work of the real cores (module docstring)."""

    match_base: float
    per_eval: float
    per_group: float
    per_cached: float
    rank_per_task: float
    assign_base: float
    assign_per_pair: float
    measured: bool = False

    def match_time(self, evaluations: int, groups: int, cached: int) -> float:
        return (
            self.match_base
            + self.per_eval * evaluations
            + self.per_group * groups
            + self.per_cached * cached
        )

    def rank_time(self, tasks: int) -> float:
        return self.rank_per_task * tasks

    def assign_time(self, pairs: int) -> float:
        return self.assign_base + self.assign_per_pair * pairs

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_file(cls, path: Path) -> CostModel:
        return cls(**json.loads(path.read_text(encoding="utf-8")))


# One calibration of the 2-core development machine (``calibrate()`` at an experiment's start-up,
# rounded): what ``--reference-costs`` and the tests
# use, so that their runs do not depend on the machine they run on.  The experiments in
# docs/results.md used ``docs/results/calibration.json``, a later ``calibrate()`` on the same
# machine (within 20 % of these: 27 µs against 30 µs an evaluation).  The Task Queue's own cost
# per call is ``sim.config.TqCosts``; the pool's, at the grid's size, ``sim.gridscale.CALL_COSTS``.
REFERENCE = CostModel(
    match_base=1.0e-5,
    per_eval=3.0e-5,
    per_group=1.0e-6,
    per_cached=4.0e-7,
    rank_per_task=1.7e-6,
    assign_base=2.0e-4,
    assign_per_pair=6.0e-7,
)


def _median_time(call: Callable[[], object], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _matcher(groups: int, tasks_per_group: int = 1) -> Matcher:
    matcher = Matcher()
    task_id = 0
    for group in range(groups):
        spec = MatchSpec(requirements="TARGET.Cpus >= 1", attributes=(("Group", group),))
        for _ in range(tasks_per_group):
            task_id += 1
            matcher.add_task(QueuedTask(task_id, spec, (f"/store/in/{task_id}.dat",)))
    return matcher


def _slope(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (slope, intercept), both at least 0."""
    fit = statistics.linear_regression([x for x, _ in points], [y for _, y in points])
    return max(fit.slope, 0.0), max(fit.intercept, 0.0)


def _match_costs() -> tuple[float, float, float, float]:
    """(base, per_eval, per_group, per_cached) from cold and warm requests of fresh pilots."""
    cold: list[tuple[float, float]] = []
    warm: list[tuple[float, float]] = []
    for groups in (50, 150, 400):
        matcher = _matcher(groups)
        for pilot_id in range(1, 4):
            matcher.add_pilot(PilotInfo(pilot_id, site="S", host=f"h{pilot_id}"))
            choose = functools.partial(matcher.choose, pilot_id, 0.0)
            cold.append((groups, _median_time(choose, 1)))
            warm.append((groups, _median_time(choose)))
    cold_slope, _ = _slope(cold)
    per_group, base = _slope(warm)
    hits: list[tuple[float, float]] = []
    matcher = _matcher(1, 2000)
    for cached in (0, 200, 1000):
        files = {f"/store/in/{i}.dat" for i in range(1, cached + 1)}
        matcher.add_pilot(PilotInfo(10 + cached, site="S", cached=files))
        matcher.choose(10 + cached, 0.0)
        hits.append((cached, _median_time(functools.partial(matcher.choose, 10 + cached, 0.0))))
    per_cached, _ = _slope(hits)
    return base, max(cold_slope - per_group, 0.0), per_group, per_cached


def _rank_cost() -> float:
    tasks = [TaskEntry(i, TaskSpec(), (InputFile(f"/store/in/{i}.dat", 100),)) for i in range(2000)]
    ranker = Ranker(WorkerAd({"Site": "S"}))
    state = WorkerState(cached=frozenset(f"/store/in/{i}.dat" for i in range(0, 2000, 7)))
    return _median_time(lambda: ranker.rank(tasks, state, limit=8, spread=1)) / len(tasks)


def _assign_costs() -> tuple[float, float]:
    points = []
    for pilots in (50, 400):
        columns = [
            {(p * 7 + k * 13) % (4 * pilots): float(k % 5) for k in range(8)} for p in range(pilots)
        ]
        matrix = RankMatrix.from_columns(4 * pilots, columns)
        points.append((float(matrix.size), _median_time(functools.partial(assign, matrix))))
    per_pair, base = _slope(points)
    return base, per_pair


def calibrate() -> CostModel:
    """Time the real cores here (about a second) and fit the model."""
    base, per_eval, per_group, per_cached = _match_costs()
    assign_base, assign_per_pair = _assign_costs()
    return CostModel(
        match_base=base,
        per_eval=per_eval,
        per_group=per_group,
        per_cached=per_cached,
        rank_per_task=_rank_cost(),
        assign_base=assign_base,
        assign_per_pair=assign_per_pair,
        measured=True,
    )
