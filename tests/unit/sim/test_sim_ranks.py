"""A round's rankings (``sim.ranks.RoundRanks``) are the real ``Ranker.rank``'s answers, for
TaskLists of one spec and of several, with and without cached inputs, every reply limit."""

from __future__ import annotations

import random

import numpy as np
import pytest

from glidein_ext.sched.ranking import (
    InputFile,
    Ranker,
    TaskEntry,
    TaskSpec,
    WorkerAd,
    WorkerState,
    tie_order,
)
from glidein_ext.sim.ranks import RoundRanks, tie_orders


def test_tie_orders_are_tie_order_for_every_position() -> None:
    positions = np.arange(0, 5000, dtype=np.uint64)
    for seed in (0, 1, 7, 150_001, 2**40):
        found = tie_orders(positions, seed)
        assert [int(x) for x in found] == [tie_order(p, seed) for p in range(5000)]


def _tasklist(rng: random.Random, size: int, specs: list[TaskSpec]) -> list[TaskEntry]:
    return [
        TaskEntry(
            1000 + i,
            rng.choice(specs),
            tuple(InputFile(f"/f/{rng.randrange(3 * size)}", 100) for _ in range(rng.randrange(3))),
        )
        for i in range(size)
    ]


@pytest.mark.parametrize("specs", [1, 2])
def test_round_ranks_equal_the_rankers_answer(specs: int) -> None:
    rng = random.Random(specs)
    choices = [TaskSpec(), TaskSpec(request_cpus=1, rank="2")][:specs]
    for size in (1, 5, 40, 301, 1200):
        shown = _tasklist(rng, size, choices)
        tasklist = RoundRanks(shown)
        positioned = [TaskEntry(i, e.spec, e.inputs) for i, e in enumerate(shown)]
        for pilot in range(1, 6):
            ranker = Ranker(WorkerAd({"Site": "S0"}))
            cached = frozenset(f"/f/{rng.randrange(3 * size)}" for _ in range(rng.randrange(40)))
            host = frozenset(f"/f/{rng.randrange(3 * size)}" for _ in range(rng.randrange(5)))
            state = WorkerState(cached=cached, host_cached=host)
            for limit in (1, 9, 64, size - 1, size + 5):
                want = ranker.rank(positioned, state, limit=limit, spread=pilot)
                got = tasklist.rank(ranker, state, limit, pilot)
                assert got == want
                assert list(got.ranks) == list(want.ranks)  # best first, in the same order


def test_a_task_that_does_not_fit_is_ranked_by_nobody() -> None:
    shown = [TaskEntry(i, TaskSpec(request_cpus=64)) for i in range(10)]
    found = RoundRanks(shown).rank(Ranker(WorkerAd({})), WorkerState(), 3, 1)
    assert found.ranks == {} and found.allowed == 0
