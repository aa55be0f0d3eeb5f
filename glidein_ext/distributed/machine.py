"""What the master's and the workers' state machines (``distributed.master_state``,
``distributed.worker_state``) share: their events' base (each carries the time it happened, as
dask/distributed's ``StateMachineEvent`` carries its ``stimulus_id``), the timer's event, the
probe of another pilot and its outcome, and the instructions their shells carry out alike.

Python 3.9, standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StateEvent:
    """An event of a state machine: what happened, at ``now`` (monotonic seconds; the
    simulator's clock in ``sim``).  Each event adds only what is its own."""

    now: float


@dataclass(frozen=True)
class Tick(StateEvent):
    """The event: the timer the state machine asked for fired."""


@dataclass(frozen=True)
class Probe:
    """The instruction: ping a pilot's DHT node (a master's suspect worker, a worker's silent
    master), then feed :class:`ProbeEnded`."""

    pilot_id: int
    address: tuple[str, int]


@dataclass(frozen=True)
class ProbeEnded(StateEvent):
    """The event: the probed pilot answered, or not."""

    pilot_id: int
    answered: bool


@dataclass(frozen=True)
class Answer:
    """The instruction: the value the message being handled is answered with (sealed by the
    shell)."""

    value: Any


@dataclass(frozen=True)
class Log:
    """The instruction: one line for the pilot's log."""

    level: int
    message: str
