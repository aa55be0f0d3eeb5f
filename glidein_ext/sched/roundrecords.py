"""What the master's round bookkeeping (``sched.rounds``) keeps of each worker and hands out:
a worker's record, the report a Task Queue call carries, a round's candidates.

Python 3.9, standard library only.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

Key = tuple[int, int]  # (task id, attempt)


@dataclass
class Worker:
    """One worker as the master sees it."""

    pilot_id: int
    address: tuple[str, int]
    task: Key | None = None  # what it runs, per the master (None: idle)
    missed: int = 0  # rounds in a row without its reply
    awaiting_since: float | None = None  # idle, the completion of ``task`` not here yet
    delivering: bool = False  # ``task`` is on its way to it (the master hands out meanwhile)
    delivered_in: int = -1  # the round in progress when it acknowledged ``task``
    heard: float = 0.0  # when it was last heard (a reply, a message, a probe answered)
    finished: int = 0  # the task id of its last completion that came (0: none)


@dataclass(frozen=True)
class Report:
    """What a Task Queue call carries for the master: completions (pilot id, completion), dead
    workers, tasks to release."""

    completions: tuple[tuple[int, Any], ...] = ()
    dead: tuple[int, ...] = ()
    release: tuple[int, ...] = ()


@dataclass(frozen=True)
class Candidates:
    """The columns of the round's rank matrix: idle workers that replied, and their ranks."""

    pilots: tuple[int, ...]
    ranks: tuple[dict[int, float], ...]
    truncated: tuple[int, ...]

    def without(self, pilots: Collection[int]) -> Candidates:
        """The candidates but ``pilots`` (given a task of their own this round)."""
        keep = [i for i, pilot in enumerate(self.pilots) if pilot not in pilots]
        cut = set(self.truncated)
        return Candidates(
            tuple(self.pilots[i] for i in keep),
            tuple(self.ranks[i] for i in keep),
            tuple(column for column, i in enumerate(keep) if i in cut),
        )
