"""The paper's greedy assignment (Delgado Peris 2014 §III.C): take the largest allowed element,
assign it,
remove its row and column, repeat.  Ties go to the lower task row, then to the lower pilot column,
so the result is one well-defined function of the matrix.

Two implementations give the same pairs: plain Python (a worker node's bare Python 3.9) sorts every
allowed pair; the numpy one first keeps each column's ``k`` first pairs in that order and grows
``k`` only for the columns left unserved.  Exact: in the global order every kept pair of a column
comes before its dropped ones, so a column served from its kept pairs is served before greedy ever
reaches a dropped pair of it, which it then skips; the runs with and without the dropped pairs take
the same decisions.  A column keeping at least min(active pilots, tasks) pairs is always served
(the other pilots take fewer of its pairs).  The same holds for a column truncated upstream when
its pilot reported its best ranks in this order; left unserved, it is in ``needs_more``.
"""

from __future__ import annotations

from glidein_ext.sched import lap
from glidein_ext.sched.matrix import RankMatrix

START_K = 16


def _bound(matrix: RankMatrix, lengths: list[int]) -> int:
    return max(1, min(sum(1 for n in lengths if n > 0), matrix.n_tasks))


Chosen = list[tuple[int, int, float]]  # (task row, pilot column, rank), by task row


def greedy_python(matrix: RankMatrix) -> tuple[Chosen, tuple[int, ...]]:
    """(chosen pairs with their ranks, truncated columns left unserved), pure Python."""
    entries = sorted(matrix.entries(), key=lambda e: (-e[2], e[0], e[1]))
    used_rows = bytearray(matrix.n_tasks)
    used_cols = bytearray(matrix.n_pilots)
    pairs = []
    for row, col, rank in entries:
        if not used_rows[row] and not used_cols[col]:
            used_rows[row] = used_cols[col] = 1
            pairs.append((row, col, rank))
    starts = [int(s) for s in matrix.starts]
    lengths = [starts[c + 1] - starts[c] for c in range(matrix.n_pilots)]
    bound = _bound(matrix, lengths)
    short = tuple(
        col for col in sorted(matrix.truncated) if not used_cols[col] and lengths[col] < bound
    )
    return sorted(pairs), short


def greedy_numpy(matrix: RankMatrix, start_k: int = START_K) -> tuple[Chosen, tuple[int, ...]]:
    """The same result as :func:`greedy_python`, with numpy, on each column's first pairs."""
    import numpy as np

    starts, rows, ranks = lap.arrays(matrix)
    n = matrix.n_pilots
    if len(rows) == 0 or n == 0:
        return [], ()
    lengths = np.diff(starts)
    bound = lap.exchange_bound(matrix, lengths)
    chosen: dict[int, lap.IntArray] = {}

    def select(col: int, k: int) -> None:
        start, end = int(starts[col]), int(starts[col + 1])
        if end - start <= k:
            chosen[col] = np.arange(start, end, dtype=np.int64)
            return
        neg = -ranks[start:end]
        threshold = np.partition(neg, k - 1)[k - 1]
        better = np.flatnonzero(neg < threshold)
        tied = np.flatnonzero(neg == threshold)
        tied = tied[np.argsort(rows[start:end][tied], kind="stable")[: k - len(better)]]
        chosen[col] = np.concatenate([better, tied]).astype(np.int64) + start

    for col in range(n):
        select(col, max(1, int(start_k)))
    while True:
        picked = np.concatenate([chosen[c] for c in range(n)])
        kept = np.array([len(chosen[c]) for c in range(n)])
        cols = np.repeat(np.arange(n, dtype=np.int64), kept)
        order = np.lexsort((cols, rows[picked], -ranks[picked]))
        used_rows = bytearray(matrix.n_tasks)
        used_cols = bytearray(n)
        pairs: Chosen = []
        for row, col, rank in zip(
            rows[picked][order].tolist(), cols[order].tolist(), ranks[picked][order].tolist()
        ):
            if not used_rows[row] and not used_cols[col]:
                used_rows[row] = used_cols[col] = 1
                pairs.append((row, col, rank))
        unserved = np.frombuffer(bytes(used_cols), dtype=np.uint8) == 0
        grow = unserved & (kept < lengths) & (kept < bound)
        if not grow.any():
            break
        for short_col in np.flatnonzero(grow):
            select(int(short_col), int(min(2 * kept[short_col], lengths[short_col])))
    short = tuple(
        col
        for col in sorted(matrix.truncated)
        if unserved[col] and lengths[col] < bound and lengths[col] > 0
    )
    return sorted(pairs), short
