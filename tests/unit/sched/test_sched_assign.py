"""The master's assignment (Delgado Peris 2014 §III.C) on worked examples: optimal and the paper's
greedy."""

from __future__ import annotations

import sys

import pytest

from glidein_ext.errors import MissingDependencyError, UsageError
from glidein_ext.sched.assign import Matching, assign, greedy, optimal, optimal_available
from glidein_ext.sched.matrix import RankMatrix

X = None  # a pair that is not allowed


def both(rows: list[list[float | None]]) -> tuple[Matching, Matching]:
    matrix = RankMatrix.from_rows(rows)
    return optimal(matrix), greedy(matrix)


def test_greedy_is_strictly_worse_on_rank_sum() -> None:
    # greedy takes the 10, then must pair 8 with -> 1; optimal takes 9 + 9
    best, seed = both([[10, 9], [9, 1]])
    assert best.pairs == ((0, 1), (1, 0)) and best.total == 18
    assert seed.pairs == ((0, 0), (1, 1)) and seed.total == 11
    assert best.served == seed.served == 2


def test_serving_more_pilots_beats_a_larger_sum() -> None:
    # pilot 1 can only run task 0; greedy gives task 0 to pilot 0 (100) and leaves pilot 1 idle
    best, seed = both([[100, 1], [1, X]])
    assert seed.pairs == ((0, 0),) and seed.total == 100 and seed.served == 1
    assert best.pairs == ((0, 1), (1, 0)) and best.total == 2 and best.served == 2


def test_negative_ranks_are_still_worth_serving() -> None:
    best, seed = both([[-5, X], [-1, -100]])
    assert best.served == 2 and best.pairs == ((0, 0), (1, 1)) and best.total == -105
    # greedy: -1 first (task 1, pilot 0), then pilot 1 has task 1 only: taken -> idle
    assert seed.pairs == ((1, 0),) and seed.total == -1


def test_among_equal_counts_the_sum_decides() -> None:
    best, _ = both([[1, 2, 3], [2, 4, 6], [3, 6, 9.5]])
    # 1 + 4 + 9.5 = 14.5 against 3 + 4 + 3 = 10 and 2 + 6 + 3 = 11 ...
    assert best.total == 14.5 and best.served == 3


def test_empty_rows_and_columns() -> None:
    best, seed = both([[X, X, X], [X, 7, X], [X, X, X]])
    assert best.pairs == seed.pairs == ((1, 1),)
    assert best.total == seed.total == 7


def test_all_disallowed_and_empty_shapes() -> None:
    shapes: list[list[list[float | None]]] = [[[X, X], [X, X]], [], [[], []]]
    for rows in shapes:
        best, seed = both(rows)
        assert best.pairs == seed.pairs == ()
        assert best.total == seed.total == 0.0 and best.served == 0


def test_more_pilots_than_tasks() -> None:
    best, seed = both([[1, 5, 3, 2]])
    assert best.pairs == seed.pairs == ((0, 1),)


def test_greedy_ties_go_to_the_lower_row_then_the_lower_column() -> None:
    seed = greedy(RankMatrix.from_rows([[5, 5], [5, 5]]))
    assert seed.pairs == ((0, 0), (1, 1))
    seed = greedy(RankMatrix.from_rows([[1, 5], [5, 5]]))
    assert seed.pairs == ((0, 1), (1, 0))
    for use_numpy in (True, False):
        assert greedy(RankMatrix.from_rows([[2, 2, 2]]), use_numpy=use_numpy).pairs == ((0, 0),)


def test_huge_ranks_keep_their_order() -> None:
    best = optimal(RankMatrix.from_rows([[1e308, -1e308], [-1e308, 1e308]]))
    assert best.pairs == ((0, 0), (1, 1))
    assert best.total == float("inf")


def test_json_document() -> None:
    best = optimal(RankMatrix.from_rows([[1.5, X], [X, 2]]))
    assert best.as_json() == {
        "method": "optimal",
        "pairs": [[0, 0], [1, 1]],
        "served": 2,
        "sum": 3.5,
    }
    assert best.by_pilot() == {0: 0, 1: 1}
    assert best.ranks == (1.5, 2.0) and best.exact


def test_assign_dispatches_and_refuses_unknown_methods() -> None:
    matrix = RankMatrix.from_rows([[10, 9], [9, 1]])
    assert assign(matrix).method == "optimal" and assign(matrix).total == 18
    assert assign(matrix, "greedy").total == 11
    with pytest.raises(UsageError, match="unknown assignment method 'best'"):
        assign(matrix, "best")


def test_without_numpy_optimal_says_so_and_greedy_still_works(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert optimal_available()
    monkeypatch.setitem(sys.modules, "numpy", None)  # import numpy -> ImportError
    assert not optimal_available()
    matrix = RankMatrix.from_rows([[100, 1], [1, X]])
    with pytest.raises(MissingDependencyError, match="needs numpy and scipy"):
        optimal(matrix)
    assert greedy(matrix).pairs == ((0, 0),)
    replies = RankMatrix.from_replies([7, 9], [{7: 1.0}, {9: 2.0, 7: 0.5}])
    assert replies.column(1) == [(1, 2.0), (0, 0.5)]


def test_truncated_columns_are_reported_when_unsure() -> None:
    # pilots 0 and 1 reported only their best task (task 0); the whole matrix could serve both
    matrix = RankMatrix.from_columns(3, [{0: 5.0}, {0: 4.0}], truncated=[0, 1])
    best = optimal(matrix)
    # either pilot might have had another task below its reported one: neither is proven
    assert best.served == 1 and best.needs_more == (0, 1) and not best.exact
    seed = greedy(matrix)  # greedy's choice for pilot 0 is final; pilot 1's is not
    assert seed.pairs == ((0, 0),) and seed.needs_more == (1,)
    # with a free reported task, the certificate holds
    matrix = RankMatrix.from_columns(3, [{0: 5.0, 1: 1.0}, {0: 4.0, 2: 3.0}], truncated=[0, 1])
    best = optimal(matrix)
    assert best.exact and best.served == 2 and best.total == 8.0
