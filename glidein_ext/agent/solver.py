"""The master's assignment of a round's rank matrix (Delgado Peris 2014 §III.C), and the other
method's on the same matrix for the counters.

``optimal`` (the default) needs numpy and scipy: without them the master logs it once and
assigns with ``greedy`` from then on; the comparison is left out (None) where the other method
cannot run.

Python 3.9 + standard library, except ``optimal`` (``sched.assign``).
"""

from __future__ import annotations

import logging
from typing import Any

from glidein_ext.errors import MissingDependencyError
from glidein_ext.sched.assign import FALLBACK_METHOD, assign, other_method
from glidein_ext.sched.matrix import RankMatrix


class RoundSolver:
    """Assigns with ``method``, falling back to ``greedy`` for good when it cannot run."""

    def __init__(self, method: str, log: logging.Logger) -> None:
        self.method = method
        self._log = log

    def solve(self, matrix: RankMatrix) -> Any:
        try:
            return assign(matrix, self.method)
        except MissingDependencyError as exc:
            self._log.warning("master: %s; assigning with %s instead", exc, FALLBACK_METHOD)
            self.method = FALLBACK_METHOD
            return assign(matrix, FALLBACK_METHOD)

    def solve_both(self, matrix: RankMatrix) -> tuple[Any, Any]:
        """The assignment, and the other method's on the same matrix (for the counters)."""
        result = self.solve(matrix)
        return result, self.compare(matrix, result.method)

    def compare(self, matrix: RankMatrix, method: str) -> Any:
        """The other method on the same matrix, for the counters (None without scipy)."""
        try:
            return assign(matrix, other_method(method))
        except MissingDependencyError:
            return None
