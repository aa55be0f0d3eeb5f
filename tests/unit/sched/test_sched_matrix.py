"""The rank matrix: constructors, validation, the master's replies and the CSV format."""

from __future__ import annotations

import sys

import pytest

from glidein_ext.errors import RankMatrixError, UsageError
from glidein_ext.sched.assign import assign
from glidein_ext.sched.matrix import RankMatrix, in_order, rank_sum


def test_from_rows_keeps_only_allowed_pairs_by_column() -> None:
    matrix = RankMatrix.from_rows([[1, None, 3], [4, 5, None]])
    assert (matrix.n_tasks, matrix.n_pilots, matrix.size) == (2, 3, 4)
    assert [matrix.column(j) for j in range(3)] == [[(0, 1.0), (1, 4.0)], [(1, 5.0)], [(0, 3.0)]]
    assert list(matrix.entries()) == [(0, 0, 1.0), (1, 0, 4.0), (1, 1, 5.0), (0, 2, 3.0)]
    assert matrix.rank(1, 1) == 5.0 and matrix.rank(0, 1) is None


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([[1, 2], [3]], "task 1: 1 values, expected 2"),
        ([[1, float("nan")]], "not a finite number"),
        ([[float("inf")]], "not a finite number"),
        ([["x"]], "is not a number"),
    ],
)
def test_from_rows_refuses_malformed_matrices(rows: list[list[object]], message: str) -> None:
    with pytest.raises(RankMatrixError, match=message):
        RankMatrix.from_rows(rows)  # type: ignore[arg-type]


def test_direct_construction_is_checked() -> None:
    with pytest.raises(RankMatrixError, match="task row 5 out of range"):
        RankMatrix(2, 1, [0, 1], [5], [1.0])
    with pytest.raises(RankMatrixError, match="task row 0 given twice"):
        RankMatrix(2, 1, [0, 2], [0, 0], [1.0, 2.0])
    with pytest.raises(RankMatrixError, match="offsets do not match"):
        RankMatrix(2, 2, [0, 1], [0], [1.0])
    with pytest.raises(RankMatrixError, match="truncated column 3"):
        RankMatrix.from_columns(2, [{0: 1.0}], truncated=[3])
    assert issubclass(RankMatrixError, UsageError)  # the CLI's exit 2


@pytest.mark.parametrize("with_numpy", [True, False])
def test_from_replies_maps_task_ids_to_rows(
    with_numpy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not with_numpy:
        monkeypatch.setitem(sys.modules, "numpy", None)
    matrix = RankMatrix.from_replies(
        [501, 400, 777], [{777: 2.5, 501: -1.0}, {}, {400: 3.0}], truncated=[0]
    )
    assert [matrix.column(j) for j in range(3)] == [[(2, 2.5), (0, -1.0)], [], [(1, 3.0)]]
    assert matrix.truncated == frozenset({0})
    with pytest.raises(RankMatrixError, match="pilot 1 ranked task 9, not listed"):
        RankMatrix.from_replies([1, 2], [{1: 1.0}, {9: 1.0}])
    with pytest.raises(RankMatrixError, match="names a task twice"):
        RankMatrix.from_replies([1, 1], [{1: 1.0}])
    with pytest.raises(RankMatrixError, match="finite"):
        RankMatrix.from_replies([1, 2], [{1: float("nan")}])


def test_csv_format() -> None:
    matrix = RankMatrix.from_csv("1, ,-2.5\n,4e1,\n")
    assert [matrix.column(j) for j in range(3)] == [[(0, 1.0)], [(1, 40.0)], [(0, -2.5)]]
    single = RankMatrix.from_csv("3\n\n4\n")  # one pilot: a blank line is a disallowed cell
    assert single.column(0) == [(0, 3.0), (2, 4.0)]
    for text, message in [
        ("", "empty"),
        ("1,2\n3\n", "line 2: 1 cells, line 1 has 2"),
        ("1,abc\n", "line 1, column 1: 'abc' is not a number"),
        ("nan\n", "not a finite number"),
        ("1,-inf\n", "not a finite number"),
    ]:
        with pytest.raises(RankMatrixError, match=message):
            RankMatrix.from_csv(text)


def test_in_order_makes_the_assignment_take_the_earlier_of_equal_tasks() -> None:
    """Of equally ranked tasks the earlier TaskList positions win (the Task Queue's order:
    priority, then age); a better rank still wins over the order."""
    replies = [{1: 0.5, 4: 0.5, 0: 0.5}, {2: 0.5, 0: 0.5, 3: 0.5}, {3: 0.5, 5: 0.5, 4: 0.5}]
    plain = assign(RankMatrix.from_replies(range(6), replies), "optimal")
    assert sorted(plain.pairs) == [(1, 0), (2, 1), (3, 2)]  # any of the equal solutions
    chosen = assign(RankMatrix.from_replies(range(6), in_order(replies)), "optimal")
    assert sorted(chosen.pairs) == [(0, 1), (1, 0), (3, 2)]  # rows 0, 1, 3: the earliest
    greedy = assign(RankMatrix.from_replies(range(6), in_order(replies)), "greedy")
    assert (0, 0) in greedy.pairs  # the earliest first
    better = [{0: 0.5, 1: 0.5}, {1: 0.9}]
    chosen = assign(RankMatrix.from_replies(range(2), in_order(better)), "optimal")
    assert sorted(chosen.pairs) == [(0, 0), (1, 1)]
    zeros = [{0: 0.0, 1: 0.0}, {0: 0.0, 1: 0.0}]  # neutral ranks: the sum stays 0, not below
    chosen = assign(RankMatrix.from_replies(range(2), in_order(zeros)), "optimal")
    assert chosen.total < 0 and rank_sum(chosen.pairs, zeros) == 0.0
    ranked = in_order([{0: 0.25, 5: 0.25}])[0]
    assert ranked[0] > ranked[5] and ranked[5] == pytest.approx(0.25, abs=1e-6)
