"""The master's assignment (Delgado Peris 2014 §III.C): from the rank matrix (row i = task i, column
j = pilot j, only allowed pairs) to pairs (task, pilot), each task and each pilot used at most once.

- ``optimal`` (the default): serves as many pilots as possible and, among those assignments,
  maximises the sum of ranks.  The seed calls the problem NP-complete; it is a linear assignment
  problem, solved exactly by scipy's sparse Jonker-Volgenant solver on each pilot's best candidates
  (:mod:`glidein_ext.sched.lap` proves the reduction).  Needs numpy and scipy; without them it
  raises :class:`~glidein_ext.errors.MissingDependencyError`.
- ``greedy``, the paper's: take the largest allowed element, assign it, remove its row and column,
  repeat; ties go to the lower task row, then the lower pilot column
  (:mod:`glidein_ext.sched.greedy`).  Plain Python when numpy is missing.

Why optimal is the default: greedy can leave pilots idle while tasks they could run are queued
(a pilot whose only allowed task was taken by a pilot that had other choices), which happens when
tasks are scarce (the end of a workflow), and it loses rank sum there.

``METHODS`` is the one list of methods: the settings, the command lines (``tq assign --method``,
``glidein-ext pilot --assignment``) and the simulator take their choices from it, so a new
method is one function and one entry there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from glidein_ext.errors import UsageError
from glidein_ext.sched import greedy as greedy_impl
from glidein_ext.sched import lap
from glidein_ext.sched.matrix import RankMatrix


@dataclass(frozen=True)
class Matching:
    """What a method chose: a matching of tasks (rows) to pilots (columns).

    ``pairs``: (task row, pilot column), ordered by task row; ``ranks``: the rank of each pair;
    ``total``: their sum.
    ``needs_more``: columns truncated upstream (their pilot reported only its best ranks) for which
    those ranks were not enough to be sure the pairs are what the method gives on the whole matrix;
    empty means exact.  The master may ask those pilots for more ranks next round.
    """

    method: str
    pairs: tuple[tuple[int, int], ...]
    ranks: tuple[float, ...]
    total: float
    needs_more: tuple[int, ...] = ()

    @property
    def served(self) -> int:
        """How many pilots got a task."""
        return len(self.pairs)

    @property
    def exact(self) -> bool:
        return not self.needs_more

    def by_pilot(self) -> dict[int, int]:
        """{pilot column: task row}."""
        return {col: row for row, col in self.pairs}

    def as_json(self) -> dict[str, Any]:
        """The `tq assign --json` document: method, pairs, served, sum."""
        return {
            "method": self.method,
            "pairs": [[row, col] for row, col in self.pairs],
            "served": self.served,
            "sum": self.total,
        }


def optimal_available() -> bool:
    """Whether ``optimal`` can run here (numpy and scipy importable)."""
    return lap.available()


def _numpy_available() -> bool:
    try:
        import numpy  # noqa: F401  (probing only)
    except ImportError:
        return False
    return True


def _result(method: str, chosen: list[tuple[int, int, float]], short: tuple[int, ...]) -> Matching:
    pairs = tuple((row, col) for row, col, _ in chosen)
    ranks = tuple(rank for _, _, rank in chosen)
    try:
        total = math.fsum(ranks)
    except OverflowError:  # ranks near the float limit: the sum is +-inf, as plain sum says
        total = sum(ranks)
    return Matching(method, pairs, ranks, total, short)


def optimal(matrix: RankMatrix, start_k: int | None = None) -> Matching:
    """Max-cardinality, then max-sum assignment (exact; a linear assignment problem, not the
    NP-complete problem the paper describes).  ``start_k``: candidates per pilot in the first
    solve (None: chosen from the shape); the served count and the sum do not depend on it, only
    the time does."""
    pairs, short = lap.solve_optimal(matrix, start_k)
    return _result("optimal", pairs, short)


def greedy(matrix: RankMatrix, use_numpy: bool | None = None) -> Matching:
    """The paper's greedy: largest allowed rank first; ties to the lower task row, then the lower
    pilot column.  ``use_numpy=None`` uses numpy when installed; both give the same pairs."""
    if use_numpy is None:
        use_numpy = _numpy_available()
    if use_numpy:
        pairs, short = greedy_impl.greedy_numpy(matrix)
    else:
        pairs, short = greedy_impl.greedy_python(matrix)
    return _result("greedy", pairs, short)


@dataclass(frozen=True)
class Method:
    """An assignment method: its solver and a one-line summary (for ``--help``)."""

    solve: Callable[[RankMatrix], Matching]
    summary: str


# The methods, by name: the only place a method is listed.
METHODS: dict[str, Method] = {
    "optimal": Method(optimal, "most pilots served, then the largest rank sum (numpy, scipy)"),
    "greedy": Method(greedy, "the largest rank first (Delgado Peris 2014 §III.C)"),
}
DEFAULT_METHOD = "optimal"
FALLBACK_METHOD = "greedy"  # needs neither numpy nor scipy


def methods_help() -> str:
    """``name: summary; ...`` for a command line's help."""
    return "; ".join(f"{name}: {method.summary}" for name, method in METHODS.items())


def method_problem(name: str) -> str | None:
    """Why ``name`` is no assignment method (one line), or None."""
    if name in METHODS:
        return None
    return f"unknown assignment method {name!r} (choose from {', '.join(METHODS)})"


def other_method(name: str) -> str:
    """The method a round is compared with, for the counters: the first other one."""
    return next(other for other in METHODS if other != name)


def assign(matrix: RankMatrix, method: str = DEFAULT_METHOD) -> Matching:
    """Run ``method`` (a name in ``METHODS``) on ``matrix``."""
    problem = method_problem(method)
    if problem is not None:
        raise UsageError(problem)
    return METHODS[method].solve(matrix)
