"""Plain values the Task Queue's pure cores share (Hasham 2011 §IV): states and match specs."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field

from glidein_ext.classads import Scalar


class TaskState(enum.StrEnum):
    """A task's life: waiting for inputs/dependencies, queued (runnable), running, done, failed."""

    WAITING = "waiting"
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


# A workflow goes on while one of its tasks is in one of these.
UNFINISHED = (TaskState.WAITING.value, TaskState.QUEUED.value, TaskState.RUNNING.value)


class PilotState(enum.StrEnum):
    """Hasham 2011 §IV-A: inactive (submitted, not running), idle, busy; plus the ends of a
    pilot."""

    INACTIVE = "inactive"
    IDLE = "idle"
    BUSY = "busy"
    GONE = "gone"  # deregistered
    LOST = "lost"  # heartbeat lapsed


class Architecture(enum.StrEnum):
    """How a site's pilots get work and find files: the three architectures of Delgado Peris 2014,
    IV.

    ``pre-dht``: the TQ matches one pilot at a time and tracks every cached file from pilot
    reports (Hasham 2011).  ``centralized``: the TQ still matches one pilot at a time, but files
    live in the site DHT and each request carries the pilot's cache list.  ``distributed``: files in
    the DHT, and the site's master pilot schedules the site in rounds (Delgado Peris 2014 §III.B-C).
    """

    PRE_DHT = "pre-dht"
    CENTRALIZED = "centralized"
    DISTRIBUTED = "distributed"

    @property
    def uses_dht(self) -> bool:
        return self is not Architecture.PRE_DHT


@dataclass(frozen=True)
class MatchSpec:
    """What a task asks of a pilot: the part of a task that decides its match group.

    Tasks with equal specs share one ClassAd evaluation per pilot (as DIRAC's task queues do).
    """

    requirements: str = "true"
    rank: str = "0"
    request_cpus: int = 1
    request_memory: int = 0  # MB
    request_disk: int = 0  # MB
    max_runtime: int = 3600  # seconds the task may run; never more than the pilot's remaining life
    attributes: tuple[tuple[str, Scalar], ...] = ()

    def key(self) -> str:
        """The group's key (the spec as JSON), made once per spec object."""
        found: str | None = self.__dict__.get("_key")
        if found is None:
            found = json.dumps(
                [
                    self.requirements,
                    self.rank,
                    self.request_cpus,
                    self.request_memory,
                    self.request_disk,
                    self.max_runtime,
                    [list(item) for item in self.attributes],
                ],
                separators=(",", ":"),
            )
            object.__setattr__(self, "_key", found)  # not a field: equality and hash ignore it
        return found


@dataclass(frozen=True)
class QueuedTask:
    """A runnable task as the matcher sees it."""

    task_id: int
    spec: MatchSpec
    inputs: tuple[str, ...] = ()
    priority: int = 0
    runnable_since: float = 0.0


@dataclass
class PilotInfo:
    """A registered pilot as the matcher sees it (Hasham 2011 §IV-E: PilotID, Host, SE, TTL,
    cache)."""

    pilot_id: int
    site: str = ""
    host: str = ""
    se: str = ""
    cpus: int = 1
    memory: int = 0
    disk: int = 0
    expires_at: float | None = None  # end of the pilot's life (register time + TTL); None: no end
    attributes: dict[str, Scalar] = field(default_factory=dict)
    requirements: str = "true"
    rank: str = "0"
    idle: bool = True
    cached: set[str] = field(default_factory=set)

    def remaining(self, now: float) -> float:
        return float("inf") if self.expires_at is None else self.expires_at - now
