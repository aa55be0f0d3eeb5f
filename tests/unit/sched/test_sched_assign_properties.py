"""Properties of the assignment: optimal against a brute force, the reduction (top-k candidates
and certificate) against the whole matrix, greedy's two implementations against each other, and
truncated replies against the whole matrix."""

from __future__ import annotations

import math
import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linear_sum_assignment

from glidein_ext.sched import greedy as greedy_impl
from glidein_ext.sched.assign import greedy, optimal
from glidein_ext.sched.matrix import RankMatrix

Rows = list[list[float | None]]

ranks = st.one_of(
    st.integers(-3, 3).map(float),  # many ties
    st.floats(-1000, 1000, allow_nan=False, allow_infinity=False),
)
cells = st.one_of(st.none(), ranks)


@st.composite
def small_matrices(draw: st.DrawFn) -> Rows:
    tasks = draw(st.integers(0, 5))
    pilots = draw(st.integers(0, 4))
    return [[draw(cells) for _ in range(pilots)] for _ in range(tasks)]


def brute_force(rows: Rows) -> tuple[int, float]:
    """(most pilots served, then the largest rank sum) over every assignment."""
    pilots = len(rows[0]) if rows else 0
    best = (0, 0.0)

    def walk(col: int, used: frozenset[int], served: int, total: float) -> None:
        nonlocal best
        if col == pilots:
            if served > best[0] or (served == best[0] and total > best[1]):
                best = (served, total)
            return
        walk(col + 1, used, served, total)  # pilot col stays idle
        for row, values in enumerate(rows):
            value = values[col]
            if row not in used and value is not None:
                walk(col + 1, used | {row}, served + 1, total + value)

    walk(0, frozenset(), 0, 0.0)
    return best


def check_assignment(rows: Rows, pairs: tuple[tuple[int, int], ...]) -> None:
    assert len({r for r, _ in pairs}) == len(pairs) == len({c for _, c in pairs})
    assert all(rows[r][c] is not None for r, c in pairs)


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-7)


@settings(max_examples=400, deadline=None)
@given(small_matrices(), st.sampled_from([None, 1, 2, 16]))
def test_optimal_equals_the_brute_force(rows: Rows, start_k: int | None) -> None:
    result = optimal(RankMatrix.from_rows(rows), start_k=start_k)
    check_assignment(rows, result.pairs)
    served, total = brute_force(rows)
    assert result.served == served
    assert close(result.total, total)
    assert result.exact


@settings(max_examples=300, deadline=None)
@given(small_matrices())
def test_greedy_is_the_seed_algorithm(rows: Rows) -> None:
    """Largest allowed element first, ties to (row, column); both implementations agree."""
    matrix = RankMatrix.from_rows(rows)
    left = [
        (-float(v), r, c) for r, vs in enumerate(rows) for c, v in enumerate(vs) if v is not None
    ]
    used_rows: set[int] = set()
    used_cols: set[int] = set()
    expected = []
    for _, row, col in sorted(left):
        if row not in used_rows and col not in used_cols:
            used_rows.add(row)
            used_cols.add(col)
            expected.append((row, col))
    for use_numpy in (True, False):
        assert greedy(matrix, use_numpy=use_numpy).pairs == tuple(sorted(expected))
    assert greedy_impl.greedy_numpy(matrix, start_k=1) == greedy_impl.greedy_python(matrix)


def random_columns(rng: random.Random, tasks: int, pilots: int) -> list[dict[int, float]]:
    density = rng.uniform(0.05, 1.0)
    tie_heavy = rng.random() < 0.5
    return [
        {
            row: float(rng.randint(0, 3)) if tie_heavy else rng.uniform(-10, 10)
            for row in range(tasks)
            if rng.random() < density
        }
        for _ in range(pilots)
    ]


def dense_optimum(tasks: int, columns: list[dict[int, float]]) -> tuple[int, float]:
    """scipy's linear_sum_assignment on the whole matrix: cardinality first, then sum."""
    pilots = len(columns)
    values = [rank for column in columns for rank in column.values()]
    if not values or not tasks or not pilots:
        return 0, 0.0
    low, span = min(values), (max(values) - min(values)) or 1.0
    weight = np.zeros((tasks, pilots))
    for col, column in enumerate(columns):
        for row, rank in column.items():
            weight[row, col] = (rank - low) / span + pilots + 2
    rows, cols = linear_sum_assignment(weight, maximize=True)
    taken = weight[rows, cols] > 0
    return int(taken.sum()), math.fsum(
        columns[c][r] for r, c in zip(rows[taken], cols[taken], strict=True)
    )


def test_the_reduction_matches_the_whole_matrix() -> None:
    """Tasks outnumbering pilots (where the reduction works) and not, ties and no ties."""
    rng = random.Random(11)
    for _ in range(150):
        pilots = rng.randint(1, 30)
        tasks = rng.randint(1, 120)
        columns = random_columns(rng, tasks, pilots)
        matrix = RankMatrix.from_columns(tasks, columns)
        served, total = dense_optimum(tasks, columns)
        for start_k in (None, 1, 3):
            result = optimal(matrix, start_k=start_k)
            assert result.served == served and close(result.total, total)
            assert result.exact


def top(column: dict[int, float], limit: int) -> dict[int, float]:
    """A worker's truncated reply: best ranks, ties in TaskList (row) order."""
    return dict(sorted(column.items(), key=lambda item: (-item[1], item[0]))[:limit])


def test_exact_answers_from_truncated_replies_are_the_whole_matrix_answers() -> None:
    rng = random.Random(12)
    proven = 0
    for _ in range(200):
        pilots = rng.randint(1, 12)
        tasks = rng.randint(1, 60)
        columns = random_columns(rng, tasks, pilots)
        limit = rng.choice([1, 2, 4, 8, pilots])
        replies = [top(column, limit) for column in columns]
        cut = [j for j, column in enumerate(columns) if len(column) > limit]
        matrix = RankMatrix.from_columns(tasks, replies, truncated=cut)
        whole = RankMatrix.from_columns(tasks, columns)
        best = optimal(matrix)
        if best.exact:
            proven += 1
            assert (best.served, round(best.total, 6)) == (
                optimal(whole).served,
                round(optimal(whole).total, 6),
            )
        if limit >= pilots:  # the exchange bound: always exact
            assert best.exact
        seed = greedy(matrix)
        if seed.exact:
            assert seed.pairs == greedy(whole).pairs
        assert set(seed.needs_more) <= set(cut)
    assert proven > 100
