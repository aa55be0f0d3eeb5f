"""The master's rank matrix (Delgado Peris 2014 §III.C): row i = task i, column j = pilot j, allowed
pairs.

Stored by column (one column per pilot, as the workers' replies arrive), as three flat sequences:
``starts`` (``n_pilots + 1`` offsets), ``tasks`` (the row of each allowed pair) and ``ranks`` (any
finite float, negatives too).  They are plain lists, or numpy arrays when
:meth:`RankMatrix.from_replies` built them with numpy; everything works on either.

A column may be *truncated*: its pilot reported only its best ranks (by rank, ties to the lower
row; see :mod:`glidein_ext.sched.ranking`).  The assignment methods then say whether the reported
ranks were enough to be sure of the result (:attr:`glidein_ext.sched.assign.Matching.needs_more`).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from glidein_ext.errors import RankMatrixError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Ints = Sequence[int] | npt.NDArray[np.int64]
    Floats = Sequence[float] | npt.NDArray[np.float64]


def _finite(value: object, where: str) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise RankMatrixError(f"{where}: {value!r} is not a number") from exc
    if not math.isfinite(number):
        raise RankMatrixError(f"{where}: {value!r} is not a finite number")
    return number


class RankMatrix:
    """Allowed (task row, pilot column) pairs with their ranks, grouped by column (CSC)."""

    def __init__(
        self,
        n_tasks: int,
        n_pilots: int,
        starts: Ints,
        tasks: Ints,
        ranks: Floats,
        truncated: Iterable[int] = (),
        *,
        check: bool = True,
    ) -> None:
        """``check=False`` is for constructors that already guarantee what ``check`` verifies:
        offsets that fit, rows in range and not repeated within a column, finite ranks."""
        self.n_tasks = int(n_tasks)
        self.n_pilots = int(n_pilots)
        self.starts = starts
        self.tasks = tasks
        self.ranks = ranks
        self.truncated = frozenset(int(j) for j in truncated)
        for col in self.truncated:
            if not 0 <= col < self.n_pilots:
                raise RankMatrixError(f"truncated column {col} out of range")
        if check:
            self._check()

    def _check(self) -> None:
        if self.n_tasks < 0 or self.n_pilots < 0:
            raise RankMatrixError("a rank matrix cannot have a negative size")
        starts = [int(s) for s in self.starts]
        if len(starts) != self.n_pilots + 1 or starts[0] != 0:
            raise RankMatrixError("column offsets do not match the number of pilots")
        if starts[-1] != len(self.tasks) or len(self.tasks) != len(self.ranks):
            raise RankMatrixError("column offsets do not match the number of allowed pairs")
        for col in range(self.n_pilots):
            if starts[col] > starts[col + 1]:
                raise RankMatrixError("column offsets must not decrease")
            seen = set()
            for index in range(starts[col], starts[col + 1]):
                row = int(self.tasks[index])
                if not 0 <= row < self.n_tasks:
                    raise RankMatrixError(f"pilot {col}: task row {row} out of range")
                if row in seen:
                    raise RankMatrixError(f"pilot {col}: task row {row} given twice")
                seen.add(row)
                _finite(self.ranks[index], f"task {row}, pilot {col}")

    # --- constructors ---

    @classmethod
    def from_rows(
        cls, rows: Sequence[Sequence[float | None]], n_pilots: int | None = None
    ) -> RankMatrix:
        """A dense matrix, one list per task; ``None`` marks a pair that is not allowed."""
        width = n_pilots if n_pilots is not None else (len(rows[0]) if rows else 0)
        columns: list[dict[int, float]] = [{} for _ in range(width)]
        for row, values in enumerate(rows):
            if len(values) != width:
                raise RankMatrixError(f"task {row}: {len(values)} values, expected {width}")
            for col, value in enumerate(values):
                if value is not None:
                    columns[col][row] = _finite(value, f"task {row}, pilot {col}")
        return cls.from_columns(len(rows), columns)

    @classmethod
    def from_columns(
        cls, n_tasks: int, columns: Sequence[Mapping[int, float]], truncated: Iterable[int] = ()
    ) -> RankMatrix:
        """One mapping {task row: rank} per pilot column."""
        starts = [0]
        tasks: list[int] = []
        ranks: list[float] = []
        for col, column in enumerate(columns):
            for row, rank in column.items():
                if not 0 <= row < n_tasks:
                    raise RankMatrixError(f"pilot {col}: task row {row} out of range")
                tasks.append(int(row))
                ranks.append(_finite(rank, f"task {row}, pilot {col}"))
            starts.append(len(tasks))
        return cls(n_tasks, len(columns), starts, tasks, ranks, truncated, check=False)

    @classmethod
    def from_replies(
        cls,
        task_ids: Sequence[int],
        replies: Sequence[Mapping[int, float]],
        truncated: Iterable[int] = (),
    ) -> RankMatrix:
        """The master's matrix from its TaskList (``task_ids``: row i is ``task_ids[i]``) and the
        workers' replies, one {task id: rank} per pilot column; ``truncated`` lists the columns
        whose pilot reported only its best ranks.  Uses numpy when it is installed (fast at 10^6
        pairs), plain Python otherwise; a task id outside the TaskList is a RankMatrixError."""
        try:
            import numpy  # noqa: F401  (only probing: the fast path needs it)
        except ImportError:
            return _replies_python(cls, task_ids, replies, truncated)
        return _replies_numpy(cls, task_ids, replies, truncated)

    @classmethod
    def from_csv(cls, text: str) -> RankMatrix:
        """The `glidein-ext tq assign` format: one CSV line per task, one cell per pilot, an
        empty cell for a pair that is not allowed; RankMatrixError naming the line otherwise."""
        rows: list[list[float | None]] = []
        width = None
        for line, read in enumerate(csv.reader(io.StringIO(text)), start=1):
            cells = read or [""]  # a blank line: one empty cell (a one-pilot matrix)
            if width is None:
                width = len(cells)
            elif len(cells) != width:
                raise RankMatrixError(f"line {line}: {len(cells)} cells, line 1 has {width}")
            values: list[float | None] = []
            for col, cell in enumerate(cells):
                stripped = cell.strip()
                where = f"line {line}, column {col}"
                values.append(_finite(stripped, where) if stripped else None)
            rows.append(values)
        if not rows:
            raise RankMatrixError("no rows: the rank matrix is empty")
        return cls.from_rows(rows, width)

    # --- reading ---

    @property
    def size(self) -> int:
        """How many pairs are allowed."""
        return len(self.tasks)

    def column(self, col: int) -> list[tuple[int, float]]:
        """(task row, rank) of every allowed pair of pilot ``col``."""
        start, end = int(self.starts[col]), int(self.starts[col + 1])
        return [(int(self.tasks[i]), float(self.ranks[i])) for i in range(start, end)]

    def entries(self) -> Iterator[tuple[int, int, float]]:
        """(task row, pilot column, rank) of every allowed pair, column by column."""
        starts = [int(s) for s in self.starts]
        tasks = [int(t) for t in self.tasks]
        ranks = [float(r) for r in self.ranks]
        for col in range(self.n_pilots):
            for index in range(starts[col], starts[col + 1]):
                yield tasks[index], col, ranks[index]

    def rank(self, row: int, col: int) -> float | None:
        """The rank of one pair, None if it is not allowed (a scan of the column)."""
        for task, value in self.column(col):
            if task == row:
                return value
        return None


# Rank taken off per TaskList position (``in_order``): below any difference a rank can show on
# the wire (``sched.tasklist.SCALE``), so it decides between equal ranks only.
ORDER_STEP = 1e-9


def rank_sum(pairs: Iterable[tuple[int, int]], replies: Sequence[Mapping[int, float]]) -> float:
    """The workers' own ranks of the (TaskList position, column) ``pairs``, summed: a round's
    sum of ranks, without ``in_order``'s tie-breaking."""
    return sum(replies[col][row] for row, col in pairs)


def in_order(replies: Sequence[Mapping[int, float]]) -> list[dict[int, float]]:
    """The workers' ranks keyed by TaskList position, each lowered by ``ORDER_STEP`` per
    position: of equally ranked tasks the assignment takes the earlier ones, in the order the
    Task Queue offered them (priority, then age: ``sched.offers``), not any."""
    return [{pos: rank - ORDER_STEP * pos for pos, rank in reply.items()} for reply in replies]


def _replies_python(
    cls: type[RankMatrix],
    task_ids: Sequence[int],
    replies: Sequence[Mapping[int, float]],
    truncated: Iterable[int],
) -> RankMatrix:
    index = {task: row for row, task in enumerate(task_ids)}
    if len(index) != len(task_ids):
        raise RankMatrixError("the TaskList names a task twice")
    columns = []
    for col, reply in enumerate(replies):
        unknown = [task for task in reply if task not in index]
        if unknown:
            raise RankMatrixError(f"pilot {col} ranked task {unknown[0]!r}, not listed")
        columns.append({index[task]: rank for task, rank in reply.items()})
    return cls.from_columns(len(task_ids), columns, truncated)


def _replies_numpy(
    cls: type[RankMatrix],
    task_ids: Sequence[int],
    replies: Sequence[Mapping[int, float]],
    truncated: Iterable[int],
) -> RankMatrix:
    import numpy as np

    ids: Any = np.asarray(task_ids, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    if len(sorted_ids) > 1 and bool(np.any(sorted_ids[1:] == sorted_ids[:-1])):
        raise RankMatrixError("the TaskList names a task twice")
    lengths = [len(reply) for reply in replies]
    starts = np.zeros(len(replies) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    total = int(starts[-1])
    keys = np.empty(total, dtype=np.int64)
    ranks = np.empty(total, dtype=np.float64)
    try:
        for col, reply in enumerate(replies):
            start, end = int(starts[col]), int(starts[col + 1])
            keys[start:end] = np.fromiter(reply.keys(), np.int64, end - start)
            ranks[start:end] = np.fromiter(reply.values(), np.float64, end - start)
    except (TypeError, ValueError, OverflowError) as exc:
        raise RankMatrixError(f"pilot {col}: task ids must be integers, ranks numbers") from exc
    if not bool(np.all(np.isfinite(ranks))):
        bad = int(np.flatnonzero(~np.isfinite(ranks))[0])
        col = int(np.searchsorted(starts, bad, side="right")) - 1
        raise RankMatrixError(f"pilot {col}: task {int(keys[bad])} has a rank that is not finite")
    where = np.searchsorted(sorted_ids, keys)
    clipped = np.minimum(where, max(len(sorted_ids) - 1, 0))
    known = (where < len(sorted_ids)) & (sorted_ids[clipped] == keys) if len(ids) else where < 0
    if not bool(np.all(known)):
        bad = int(np.flatnonzero(~known)[0])
        col = int(np.searchsorted(starts, bad, side="right")) - 1
        raise RankMatrixError(f"pilot {col} ranked task {int(keys[bad])}, not listed")
    rows = order[clipped] if len(ids) else keys
    return cls(len(task_ids), len(replies), starts, rows, ranks, truncated, check=False)
