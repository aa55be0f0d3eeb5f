"""The optimal assignment's engine (numpy/scipy): a sparse linear assignment on each pilot's best
candidates, grown until a certificate proves the result optimal for the whole matrix.

Objective (Delgado Peris 2014 §III.C, corrected): serve as many pilots as possible and, among those
assignments, maximise the sum of ranks.  With ranks scaled to ``w`` in [0, 1], an allowed pair
weighs ``B + w`` with ``B = n + 2`` and every pilot ``j`` has a private "stay idle" row of weight 1.
One more served pilot gains at least ``B - 1 - n > 0`` whatever the ranks lose, so a maximum-weight
full matching (scipy's LAPJVsp, ``min_weight_full_bipartite_matching``) is max-cardinality first,
max-sum second.  This is a linear assignment problem, solvable in polynomial time (the paper calls
it
NP-complete; it is not).  Ranks that differ by less than about ``n**2 * 2**-52`` of their span are
treated as equal.

Reduction.  Column ``j`` keeps only ``T_j``, its ``k_j`` best tasks (tiny deterministic jitter
spreads exact ties over the tasks, so that pilots with equal preferences do not all keep the same
ones).  Two facts make the reduced solution ``M`` exact:

1. Exchange (no certificate needed): if ``|T_j| >= min(active pilots, tasks)``, some optimal
   matching of the full matrix uses only ``T_j`` in column ``j``: the other matched pilots hold at
   most ``|T_j| - 1`` of ``T_j``, so a pilot matched outside ``T_j`` can move to a free task of
   ``T_j`` that ranks at least as high (same cardinality, sum not lower).
2. Certificate (LP duality): in the matching LP, a task left unmatched by an optimal ``M`` has dual
   ``u_t = 0`` (complementary slackness), so ``v_j >= W_tj`` for every ``t`` in ``T_j``.  If some
   unmatched ``t`` in ``T_j`` weighs at least as much as every dropped pair of column ``j``, the
   duals stay feasible for those dropped pairs and ``M`` stays optimal with them.

Columns that fail both keep ``min(active pilots, tasks)`` tasks and the problem is solved again
(fact 1 then holds for them).  When more than an eighth of the columns fail (tasks are scarce:
the end of a workflow) the reduction is dropped and the whole matrix solved, dense (scipy's
``linear_sum_assignment``) when it has at most ``DENSE_CELLS`` cells: at most three solves.

A column truncated upstream (its pilot reported only its best ranks) has an unknown tail that
weighs at most its lowest reported rank; when it still fails with everything reported kept, it is
returned in ``needs_more``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from glidein_ext.errors import MissingDependencyError
from glidein_ext.sched.matrix import RankMatrix

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    IntArray = npt.NDArray[np.int64]
    FloatArray = npt.NDArray[np.float64]

START_K = 16  # candidates per pilot in the first solve (grown where the certificate fails)
DENSE_CELLS = 4_000_000  # without reduction, a matrix this small is solved dense (faster, 32 MB)


def available() -> bool:
    """Whether numpy and scipy's sparse assignment solver can be imported."""
    try:
        _import()
    except MissingDependencyError:
        return False
    return True


def _import() -> tuple[Any, Any, Any, Any]:
    try:
        import numpy
        from scipy.optimize import linear_sum_assignment
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import min_weight_full_bipartite_matching
    except ImportError as exc:
        raise MissingDependencyError(
            "the optimal assignment needs numpy and scipy (pip install '.[sched]' in a glidein-ext "
            "checkout); "
            "use the greedy method without them"
        ) from exc
    return numpy, csr_matrix, min_weight_full_bipartite_matching, linear_sum_assignment


def arrays(matrix: RankMatrix) -> tuple[IntArray, IntArray, FloatArray]:
    """The matrix's (starts, tasks, ranks) as numpy arrays (no copy when they already are)."""
    import numpy as np

    return (
        np.asarray(matrix.starts, dtype=np.int64),
        np.asarray(matrix.tasks, dtype=np.int64),
        np.asarray(matrix.ranks, dtype=np.float64),
    )


def exchange_bound(matrix: RankMatrix, lengths: IntArray) -> int:
    """A column keeping at least this many of its best tasks needs no certificate (fact 1)."""
    return max(1, min(int((lengths > 0).sum()), matrix.n_tasks))


class _Columns:
    """The per-column candidate selection, redone only for the columns whose ``k`` changes."""

    def __init__(self, starts: IntArray, rows: IntArray, weights: FloatArray) -> None:
        import numpy as np

        self.np = np
        self.starts = starts
        self.weights = weights
        self.rows = rows
        self._keys: FloatArray | None = None
        self.chosen: dict[int, IntArray] = {}
        self.dropped_max: dict[int, float] = {}

    def keys(self) -> FloatArray:
        """Weights plus a tiny jitter that spreads exact ties (a Knuth multiplicative hash of
        (row, column)); far below any rank gap that matters, and the certificate uses the exact
        weights anyway."""
        if self._keys is None:
            np = self.np
            cols = np.repeat(np.arange(len(self.starts) - 1, dtype=np.int64), np.diff(self.starts))
            jitter = ((self.rows * 2654435761 + cols * 40503) % 4093).astype(np.float64) * 1e-13
            self._keys = self.weights + jitter
        return self._keys

    def select(self, col: int, k: int) -> None:
        np = self.np
        start, end = int(self.starts[col]), int(self.starts[col + 1])
        if end - start <= k:
            self.chosen[col] = np.arange(start, end, dtype=np.int64)
            self.dropped_max[col] = -math.inf
            return
        part = np.argpartition(-self.keys()[start:end], k - 1)
        self.chosen[col] = part[:k].astype(np.int64) + start
        self.dropped_max[col] = float(self.weights[start:end][part[k:]].max())


def _graph(
    np: Any,
    csr_matrix: Any,
    n_tasks: int,
    kept: IntArray,
    chosen: IntArray,
    rows: IntArray,
    weights: FloatArray,
) -> Any:
    """The solver's input, pilots x (tasks + one idle task per pilot), built as CSR directly
    (the chosen pairs are already grouped by pilot): a pair weighs ``n + 2 + w``, idle 1."""
    n = len(kept)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(kept + 1, out=indptr[1:])
    data = np.empty(int(indptr[-1]))
    indices = np.empty(int(indptr[-1]), dtype=np.int64)
    where = np.arange(len(chosen)) + np.repeat(np.arange(n), kept)
    data[where] = weights[chosen] + (n + 2.0)
    indices[where] = rows[chosen]
    idle = indptr[1:] - 1
    data[idle] = 1.0
    indices[idle] = n_tasks + np.arange(n)
    return csr_matrix((data, indices, indptr), shape=(n, n_tasks + n))


def _solve_dense(
    np: Any,
    dense_solver: Any,
    n_tasks: int,
    n_pilots: int,
    cols: IntArray,
    rows: IntArray,
    weights: FloatArray,
) -> tuple[IntArray, IntArray]:
    """scipy's dense linear_sum_assignment on the given pairs; any other cell weighs 0 (taking it
    is staying idle).  Returns (pilots, targets) as the sparse solver does (idle: >= n_tasks)."""
    weight = np.zeros((n_pilots, n_tasks))
    weight[cols, rows] = weights + (n_pilots + 2.0)
    pilots, tasks = dense_solver(weight, maximize=True)
    targets = np.full(n_pilots, n_tasks, dtype=np.int64)
    allowed = weight[pilots, tasks] > 0
    targets[pilots[allowed]] = tasks[allowed]
    return np.arange(n_pilots, dtype=np.int64), targets


def _weights(np: Any, matrix: RankMatrix, ranks: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(ranks scaled to [0, 1], per column the most an unreported rank can weigh or -inf)."""
    scale = float(np.abs(ranks).max()) or 1.0  # first into [-1, 1]: no overflow at 1e308
    scaled = ranks / scale
    low, high = float(scaled.min()), float(scaled.max())
    weights = (scaled - low) / (high - low if high > low else 1.0)
    tail = np.full(matrix.n_pilots, -math.inf)
    for col in matrix.truncated:  # a truncated column's tail: at most its lowest reported rank
        start, end = int(matrix.starts[col]), int(matrix.starts[col + 1])
        if end > start:
            tail[col] = weights[start:end].min()
    return weights, tail


def solve_optimal(
    matrix: RankMatrix, start_k: int | None = None
) -> tuple[list[tuple[int, int, float]], tuple[int, ...]]:
    """((task row, pilot column, rank) of a max-cardinality-then-max-sum assignment, by task row;
    columns that need more of their pilot's ranks to be sure).  ``start_k``: candidates per pilot
    in the first solve; None chooses (no reduction when tasks are fewer than twice the pilots
    and the matrix fits ``DENSE_CELLS``, else ``START_K``)."""
    np, csr_matrix, full_matching, dense_solver = _import()
    starts, rows, ranks = arrays(matrix)
    n, m = matrix.n_pilots, matrix.n_tasks
    if len(rows) == 0 or n == 0:
        return [], ()
    lengths = np.diff(starts)
    weights, tail = _weights(np, matrix, ranks)
    bound = exchange_bound(matrix, lengths)
    whole = start_k is None and m < 2 * n and m * n <= DENSE_CELLS
    first = START_K if start_k is None else max(int(start_k), 1)
    columns = _Columns(starts, rows, weights)
    k = lengths if whole else np.minimum(first, lengths)
    for col in range(n):
        columns.select(col, int(k[col]))
    while True:
        kept = np.array([len(columns.chosen[c]) for c in range(n)], dtype=np.int64)
        chosen = np.concatenate([columns.chosen[c] for c in range(n)])
        cols = np.repeat(np.arange(n, dtype=np.int64), kept)
        if whole and m * n <= DENSE_CELLS:
            pilots, targets = _solve_dense(
                np, dense_solver, m, n, cols, rows[chosen], weights[chosen]
            )
        else:
            graph = _graph(np, csr_matrix, m, kept, chosen, rows, weights)
            pilots, targets = full_matching(graph, True)
        served = targets < m
        matched = np.zeros(m, dtype=bool)
        matched[targets[served]] = True
        # certificate (fact 2): a free kept task weighing at least every dropped pair
        dropped = np.maximum(np.array([columns.dropped_max[c] for c in range(n)]), tail)
        free = ~matched[rows[chosen]] & (weights[chosen] >= dropped[cols])
        certified = np.bincount(cols, weights=free, minlength=n) > 0
        failing = (dropped > -math.inf) & (kept < bound) & ~certified
        growable = failing & (kept < lengths)
        if not growable.any():
            break
        if 8 * int(growable.sum()) > n:  # the reduction does not pay (tasks are scarce): drop it
            whole = True
            growable = kept < lengths
        for col in np.flatnonzero(growable):  # straight to the exchange bound (fact 1) or all
            columns.select(int(col), int(lengths[col] if whole else min(bound, lengths[col])))
    pairs = []
    offsets = np.concatenate([[0], np.cumsum(kept)])
    for pilot, task in zip(pilots[served].tolist(), targets[served].tolist()):
        mine = chosen[offsets[pilot] : offsets[pilot + 1]]
        entry = int(mine[np.flatnonzero(rows[mine] == task)[0]])
        pairs.append((task, pilot, float(ranks[entry])))
    pairs.sort()
    return pairs, tuple(int(c) for c in np.flatnonzero(failing))
