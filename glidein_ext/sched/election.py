"""Who is a distributed site's master (Delgado Peris 2014 §III.B), pure.

"Since every pilot needs to register with the TQ on wake-up, the TQ can assign the master role to a
site's first registered pilot and inform the following ones about it.  When the master pilot dies,
a simple election process is carried out to choose the pilot with lowest identifier and the TQ is
informed about the result."  Three parts:

- :func:`arbitrate`, the Task Queue's rule: the role goes to a claimant only if the old master is
  gone (it left, it was lost, or it has made no call for the master timeout) and the claimant is
  the live pilot of the site with the lowest id, leaving out the lower-id pilots the claimant
  could not reach; each grant comes with a new epoch, and every master call carries its epoch, so
  a stale master is refused and two masters never both assign.
- :class:`Succession`, a worker's side: it hears the master (each TaskList, each answer) with the
  succession list the master broadcasts (the live pilots with the lowest ids); when the master
  is silent for ``silence`` seconds it probes it; when the probe fails, the first successor
  claims at once, the k-th after ``k * stagger`` seconds (in case those before it died too), and a
  pilot outside the list after ``patience``.  A pilot that never heard a list (it joined after the
  last TaskList, or while no master was alive) claims after one ``stagger``: the Task Queue grants
  the role only to the lowest live id, so its claim is refused while a successor's is due, and a
  wait of ``patience`` (minutes) would leave the site without a master if the successors left
  with the master.  A refused claim that names a live master adopts it.
- :func:`lost_own_task`, the new master's own pilot at a takeover: the Task Queue may list it
  holding a task it never got (its hand-out failed and the old master died before the release
  reached the Task Queue); a master is no worker of its own rounds, so it releases that task.

Python 3.9, standard library only (it runs in the pilots).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Collection, Sequence
from dataclasses import InitVar, dataclass, field

Address = tuple[str, int]


@dataclass(frozen=True)
class Verdict:
    """The Task Queue's answer to a claim, and why (one line)."""

    granted: bool
    reason: str


def arbitrate(
    claimant: int,
    master: int | None,
    master_alive: bool,
    live: Collection[int],
    unreachable: Collection[int] = (),
) -> Verdict:
    """The Task Queue's rule for a claim of the master role.

    ``master``: the current master's pilot id (None: none); ``master_alive``: it is live and made
    a call within the master timeout; ``live``: the site's live pilots (the claimant among them
    if it is live); ``unreachable``: pilots the claimant could not reach over the DHT (only those
    with a lower id than the claimant's matter).
    """
    if claimant not in live:
        return Verdict(False, f"pilot {claimant} is not a live pilot of the site")
    if master == claimant:  # it calls: alive (a slow master taking its role back)
        return Verdict(True, f"pilot {claimant} is the master already")
    if master is not None and master_alive:
        return Verdict(False, f"pilot {master} is the master and alive")
    skipped = {p for p in unreachable if p < claimant}
    candidates = [p for p in live if p != master and p not in skipped]
    lowest = min(candidates)
    if lowest != claimant:
        return Verdict(False, f"pilot {lowest} has a lower id")
    return Verdict(True, f"pilot {claimant} is the live pilot with the lowest id")


@dataclass(frozen=True)
class MasterView:
    """What a worker knows of its master."""

    pilot_id: int
    address: Address
    epoch: int


class Action(enum.Enum):
    NONE = "none"
    PROBE = "probe"  # ping the master: has it died?
    CLAIM = "claim"  # ask the Task Queue for the role


@dataclass(eq=False)
class Succession:
    """One worker's view of its site's master, and when it must act."""

    me: int
    silence: float
    stagger: float
    patience: float
    retry: float = 1.0
    now: InitVar[float] = 0.0
    master: MasterView | None = field(default=None, init=False)
    successors: tuple[int, ...] = field(default=(), init=False)

    def __post_init__(self, now: float) -> None:
        self._heard_at = now
        self._dead_since: float | None = now  # no master known yet
        self._probing = False
        self._next_claim = -math.inf

    @property
    def is_master(self) -> bool:
        return self.master is not None and self.master.pilot_id == self.me

    @property
    def master_dead(self) -> bool:
        return self._dead_since is not None

    def heard(
        self, master: MasterView, now: float, successors: Sequence[int] | None = None
    ) -> bool:
        """A message from ``master`` (a TaskList, an answer); False if its epoch is older than
        the one this worker knows (a stale master: ignored)."""
        if self.master is not None and master.epoch < self.master.epoch:
            return False
        self.master = master
        if successors is not None:
            self.successors = tuple(successors)
        self._heard_at = now
        self._dead_since = None
        self._probing = False
        return True

    def adopt(self, master: MasterView | None, now: float) -> None:
        """The Task Queue named the master (registration, a refused claim); None: it knows none
        alive, so the election goes on."""
        if master is None:
            if self._dead_since is None:
                self._dead_since = now
            return
        self.heard(master, now)

    def forget(self, now: float, successors: Sequence[int] | None = None) -> None:
        """The master said it is not the master any more (it stepped down, or left; a leaving
        master says who succeeds it)."""
        if successors is not None:
            self.successors = tuple(successors)
        self._probing = False
        if self._dead_since is None:
            self._dead_since = now

    def next_action(self, now: float) -> Action:
        if self.is_master and self._dead_since is None:
            return Action.NONE
        if self._dead_since is None:
            if not self._probing and now - self._heard_at >= self.silence:
                self._probing = True
                return Action.PROBE
            return Action.NONE
        if now < self._next_claim:
            return Action.NONE
        if now - self._dead_since >= self._claim_delay():
            self._next_claim = now + self.retry
            return Action.CLAIM
        return Action.NONE

    def _claim_delay(self) -> float:
        if self.me in self.successors:
            return self.successors.index(self.me) * self.stagger
        if not self.successors:  # never heard a list: the Task Queue knows the order
            return self.stagger
        return self.patience

    def probe_answered(self, now: float) -> None:
        """The master answered the probe: alive after all."""
        self._probing = False
        self._heard_at = now

    def probe_failed(self, now: float) -> None:
        """The master did not answer: dead, the election starts."""
        self._probing = False
        if self._dead_since is None:
            self._dead_since = now

    def granted(self, epoch: int, address: Address, now: float) -> None:
        """The Task Queue gave this pilot the role."""
        self.heard(MasterView(self.me, address, epoch), now)

    def waiting_for(self, now: float) -> float:
        """Seconds until :meth:`next_action` may have something to do."""
        if self._dead_since is None:
            if self._probing or self.is_master:
                return self.silence
            return max(0.0, self._heard_at + self.silence - now)
        start = max(self._next_claim, self._dead_since + self._claim_delay())
        return max(0.0, start - now)


def lost_own_task(listed: int | None, running: int | None, unsynced: Collection[int]) -> int | None:
    """At a takeover: the task the Task Queue lists for the new master's own pilot (``listed``),
    when that pilot neither runs it (``running``: its task, running or being reported) nor
    holds its completion for a sync (``unsynced``); None when there is none to release."""
    if listed is None or listed == running or listed in unsynced:
        return None
    return listed
