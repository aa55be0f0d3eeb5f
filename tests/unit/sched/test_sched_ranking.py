"""A worker ranks the master's TaskList (Delgado Peris 2014 §III.C): filters, ClassAd Rank,
locality."""

from __future__ import annotations

import ast
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from glidein_ext.errors import MissingDependencyError
from glidein_ext.sched.ranking import (
    TASKS_PER_IDLE,
    InputFile,
    Ranker,
    RankWeights,
    TaskEntry,
    TaskSpec,
    WorkerAd,
    WorkerState,
    squash,
)

WORKER = WorkerAd(
    attributes={"Site": "T2_ES_CIEMAT", "Host": "wn1", "Owner": "cms"},
    cpus=4,
    memory=8000,
    disk=20000,
)
GB = 1_000_000_000


def ids(ranker: Ranker, tasks: list[TaskEntry], state: WorkerState | None = None) -> list[int]:
    return list(ranker.rank(tasks, state or WorkerState()).ranks)


def test_requirements_both_ways() -> None:
    ranker = Ranker(replace(WORKER, requirements='TARGET.Owner == "cms"'))
    mine = (("Owner", "cms"),)
    tasks = [
        TaskEntry(1, TaskSpec(requirements='TARGET.Site == "T2_ES_CIEMAT"', attributes=mine)),
        TaskEntry(2, TaskSpec(requirements='TARGET.Site == "T1_US_FNAL"', attributes=mine)),
        TaskEntry(3, TaskSpec(attributes=(("Owner", "atlas"),))),  # the worker refuses it
        TaskEntry(4, TaskSpec(requirements="TARGET.Cpus >= 4", attributes=mine)),
    ]
    assert sorted(ids(ranker, tasks)) == [1, 4]


def test_resources_and_remaining_life() -> None:
    ranker = Ranker(WORKER)
    tasks = [
        TaskEntry(1, TaskSpec(request_cpus=4, request_memory=8000, request_disk=20000)),
        TaskEntry(2, TaskSpec(request_cpus=5)),
        TaskEntry(3, TaskSpec(request_memory=8001)),
        TaskEntry(4, TaskSpec(request_disk=20001)),
        TaskEntry(5, TaskSpec(max_runtime=3600)),
        TaskEntry(6, TaskSpec(max_runtime=3601)),
    ]
    ranking = ranker.rank(tasks, WorkerState(remaining=3600))
    assert sorted(ranking.ranks) == [1, 5]
    assert ranking.allowed == 2 and not ranking.truncated
    assert sorted(ids(ranker, tasks, WorkerState(remaining=math.inf))) == [1, 5, 6]


def test_classad_ranks_order_tasks_of_equal_locality() -> None:
    ranker = Ranker(replace(WORKER, rank="TARGET.Priority"))
    tasks = [
        TaskEntry(1, TaskSpec(attributes=(("Priority", 1),))),
        TaskEntry(2, TaskSpec(attributes=(("Priority", 5),))),
        TaskEntry(3, TaskSpec(rank="MY.Bonus", attributes=(("Priority", 5), ("Bonus", 2)))),
    ]
    ranks = ranker.rank(tasks, WorkerState()).ranks
    assert list(ranks) == [3, 2, 1]
    assert ranks[1] == pytest.approx(squash(1)) and ranks[3] == pytest.approx(squash(5) + squash(2))


def test_locality_own_cache_beats_host_beats_nothing_whatever_the_ranks() -> None:
    ranker = Ranker(WorkerAd(cpus=1, rank="1000000"))  # a huge constant Rank
    eager = TaskSpec(rank="1000000")
    tasks = [
        TaskEntry(1, eager, (InputFile("/none", GB),)),
        TaskEntry(2, TaskSpec(rank="-1000000"), (InputFile("/host", GB),)),
        TaskEntry(3, TaskSpec(rank="-1000000"), (InputFile("/own", GB),)),
        TaskEntry(4, eager, ()),
    ]
    state = WorkerState(cached=frozenset({"/own"}), host_cached=frozenset({"/host"}))
    ranks = ranker.rank(tasks, state).ranks
    assert list(ranks)[:2] == [3, 2]
    assert min(ranks[2], ranks[3]) > max(ranks[1], ranks[4])
    weights = RankWeights()
    assert ranks[3] - ranks[2] == pytest.approx(
        (1 - weights.host) * (weights.files + weights.bytes)
    )


def test_locality_counts_files_and_bytes() -> None:
    ranker = Ranker(WorkerAd(cpus=1))
    state = WorkerState(cached=frozenset({"/a", "/b", "/big"}))
    tasks = [
        TaskEntry(1, TaskSpec(), (InputFile("/a", 1), InputFile("/x", 99))),  # 1 file, 1%
        TaskEntry(2, TaskSpec(), (InputFile("/big", 99), InputFile("/x", 1))),  # 1 file, 99%
        TaskEntry(3, TaskSpec(), (InputFile("/a", 1), InputFile("/b", 1), InputFile("/x", 98))),
        TaskEntry(4, TaskSpec(), (InputFile("/a", 0),)),  # empty inputs: no bytes term
    ]
    ranks = ranker.rank(tasks, state).ranks
    assert list(ranks) == [3, 2, 1, 4]
    assert ranks[4] == 8.0 and ranks[1] == pytest.approx(8 + 8 * 0.01)
    assert ranks[2] == pytest.approx(8 + 8 * 0.99) and ranks[3] == pytest.approx(16 + 8 * 0.02)


def test_groups_are_evaluated_once_and_remembered() -> None:
    ranker = Ranker(WORKER)
    spec = TaskSpec(requirements='TARGET.Site == "T2_ES_CIEMAT"')
    other = TaskSpec(requirements="TARGET.Cpus > 100")
    tasks = [TaskEntry(i, spec if i % 2 else other) for i in range(1000)]
    ranking = ranker.rank(tasks, WorkerState())
    assert ranking.allowed == 500 and ranker.evaluations == 2
    ranker.rank(tasks, WorkerState())
    assert ranker.evaluations == 2
    assert ranker.verdict(spec).matched and not ranker.verdict(other).matched


def test_limit_keeps_the_best_with_ties_in_tasklist_order_or_spread() -> None:
    ranker = Ranker(WorkerAd(cpus=1))
    state = WorkerState(cached=frozenset({"/hit"}))
    tasks = [TaskEntry(100 + i, TaskSpec()) for i in range(10)]
    tasks.append(TaskEntry(7, TaskSpec(), (InputFile("/hit", 5),)))
    ranking = ranker.rank(tasks, state, limit=3)
    assert list(ranking.ranks) == [7, 100, 101]
    assert ranking.allowed == 11 and ranking.truncated
    spread = [list(ranker.rank(tasks, state, limit=3, spread=seed).ranks) for seed in range(6)]
    assert all(reply[0] == 7 for reply in spread)
    assert len({tuple(reply) for reply in spread}) > 1  # different workers, different ties
    assert spread[0] == list(ranker.rank(tasks, state, limit=3, spread=0).ranks)
    assert ranker.rank(tasks, state, limit=0).ranks == {}


def test_trivial_expressions_need_no_classad2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "classad2", None)
    monkeypatch.setitem(sys.modules, "glidein_ext.classads", None)
    ranker = Ranker(WorkerAd(cpus=1, rank="2"))
    ranks = ranker.rank(
        [TaskEntry(1, TaskSpec(requirements=" TRUE ", rank="-1.5e0"))], WorkerState()
    )
    assert ranks.ranks == {1: pytest.approx(squash(2) + squash(-1.5))}
    assert ranker.evaluations == 0
    with pytest.raises(MissingDependencyError, match="needs classad2"):
        ranker.rank([TaskEntry(2, TaskSpec(requirements="TARGET.Cpus > 0"))], WorkerState())


def test_sched_parses_as_python_3_9() -> None:
    """The worker node's Python (the brief's 3.9 rule): syntax, and the future import."""
    package = Path(__file__).resolve().parents[3] / "glidein_ext" / "sched"
    for path in sorted(package.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, str(path), feature_version=(3, 9))
        if path.name != "__init__.py":
            assert "from __future__ import annotations" in source, path
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "zip":
                assert not any(k.arg == "strict" for k in node.keywords), path


def test_equal_ranks_come_by_window_of_the_tasklist_then_spread() -> None:
    """A master fetches ``TASKS_PER_IDLE`` tasks per idle worker: the first quarter of the
    TaskList, offered first (priority, then age), is what each worker lists first, shuffled
    within that window so that workers spread over it."""
    ranker = Ranker(WorkerAd(cpus=1))
    tasks = [TaskEntry(100 + i, TaskSpec()) for i in range(40)]  # windows of 10
    window = 40 // TASKS_PER_IDLE
    replies = [list(ranker.rank(tasks, WorkerState(), limit=6, spread=s).ranks) for s in range(8)]
    assert all(all(100 <= task < 100 + window for task in reply) for reply in replies)
    assert len({tuple(reply) for reply in replies}) > 1  # shuffled per worker
    full = list(ranker.rank(tasks, WorkerState(), spread=3).ranks)
    assert [(task - 100) // window for task in full] == sorted((t - 100) // window for t in full)
