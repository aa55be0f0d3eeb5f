"""The master's round phases, timed (its log, and the Task Queue's counters, which the next
``sync`` carries them to).

The phases: the wait from the first event to the round (batching, and the end of the round
before), the Task Queue's sync, the TaskList broadcast with its replies, reading the replies,
solving the rank matrix (and the other method, for the counters), the Task Queue's assign,
probing suspects; and handing the tasks out, which goes on beside the next round (timed when it
ends).  Pure: the caller gives the time (``distributed.master_state``).  Python 3.9, standard
library only.
"""

from __future__ import annotations

from collections.abc import Iterable

PHASES = ("wait", "sync", "broadcast", "replies", "solve", "tq_assign", "hand_out", "probe")


class RoundPhases:
    """The last round's phases, the totals over the role's rounds, and the seconds the Task
    Queue lacks."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}  # the last round's phases, seconds
        self.totals = dict.fromkeys(PHASES, 0.0)  # over every round of the role
        self.rounds = 0
        self._unsent: dict[str, float] = {}

    def start(self, waited: float) -> None:
        """A round starts, ``waited`` seconds after its first event."""
        self.timings = {"wait": max(0.0, waited)}

    def lap(self, phase: str, since: float, now: float) -> float:
        """Time ``phase`` of this round from ``since`` to ``now``; ``now``."""
        self.timings[phase] = self.timings.get(phase, 0.0) + now - since
        return now

    def account(self, number: int, offered: int, candidates: int, idle: int, replies: int) -> str:
        """Round ``number`` is over: its phases join the totals and what the Task Queue lacks;
        its line for the master's log."""
        self.rounds += 1
        for phase, seconds in self.timings.items():
            self.add(phase, seconds)
        return (
            f"master: round {number}: {offered} task(s) offered to {candidates} candidate(s), "
            f"{idle} idle of {replies} that answered; {self.line()}"
        )

    def add(self, phase: str, seconds: float) -> None:
        """Seconds of ``phase`` outside a round's timings (a round's hand-outs, ending later)."""
        self.totals[phase] = self.totals.get(phase, 0.0) + seconds
        self._unsent[phase] = self._unsent.get(phase, 0.0) + seconds

    def unsent(self) -> tuple[tuple[str, float], ...]:
        """What the next ``sync`` carries."""
        return tuple((p, round(v, 6)) for p, v in self._unsent.items() if v > 0)

    def sent(self, phases: Iterable[tuple[str, float]]) -> None:
        """A ``sync`` carrying ``phases`` got through: the Task Queue counted them."""
        for phase, seconds in phases:
            self._unsent[phase] -= seconds

    def line(self) -> str:
        """The last round's phases, for the log."""
        return ", ".join(f"{p} {self.timings[p]:.3f} s" for p in PHASES if p in self.timings)
