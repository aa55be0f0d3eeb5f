"""The hand-off of Task Queue tasks from a glidein's agent to its own startd (pure).

Hasham 2011 §IV inside HTCondor: the pilot's tasks run as HTCondor jobs of the glidein, pulled by
its startd through the fetch-work hooks.  Each task the agent's lanes (the glidein's pilots, one
task each) obtained goes through these stages, driven by the hooks:

    OFFERED --FETCH_WORK--> HANDED --REPLY_FETCH accept--> ACCEPTED --PREPARE_JOB--> RUNNING
       ^                      |  reject (or no verdict in reply_timeout)                |
       +----------------------+                                      JOB_EXIT ---> ENDED

(PREPARE_JOB may come before REPLY_FETCH: the two hooks race.)  How a task ENDED
(:class:`TaskEnd`): ``exited`` -- the job ran to its own end, its exit code (a signal as a
negative code, as a killed subprocess) is the task's outcome; ``evicted`` -- HTCondor vacated,
removed or held it, or its starter vanished: not the task's fault, the lane gives it back;
``cancelled`` -- it never started (the glidein retires, the agent stops, the startd refused it
again and again).

Room (Sfiligoi 2013's "no new job starts"; a lane asks only when the startd has room):
every fetch from a free slot tells what the slot has left; ``room`` is those CPUs less the ones held
by
tasks not yet handed out and by lanes asking for a task right now.  A lane asks the
Task Queue (or its master) only when ``begin_ask`` finds room, so a glidein never holds more work
than its startd can start.  A closed hand-off (retiring, stopping) has no room and cancels what
it has not handed out.

Everything here is synchronous and clock-free (``now`` is passed in); ``handoff.board`` adds the
locking and waiting.  Python 3.9, standard library only.
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Key = tuple[int, int]  # (task id, attempt)


class Stage(str, enum.Enum):
    OFFERED = "offered"
    HANDED = "handed"
    ACCEPTED = "accepted"
    RUNNING = "running"
    ENDED = "ended"


class EndKind(str, enum.Enum):
    EXITED = "exited"
    EVICTED = "evicted"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class TaskEnd:
    """How a handed-off task ended: the kind, the task's exit code (exited), and why."""

    kind: EndKind
    exit_code: int = 0
    detail: str = ""


@dataclass(frozen=True)
class SlotView:
    """What a fetch from a free slot says: what is left on it (memory MB, disk KiB)."""

    name: str
    cpus: int
    memory: int
    disk: int
    total_cpus: int
    total_memory: int
    partitionable: bool = True


@dataclass
class HandedTask:
    """One task attempt on its way through the startd."""

    key: Key
    lane: int
    cpus: int
    memory: int  # MB
    disk: int  # KiB
    ad: dict[str, Any]  # the job ad FETCH_WORK prints (handoff.taskad.job_ad)
    stage: Stage = Stage.OFFERED
    since: float = 0.0  # when it entered its stage
    rejections: int = 0
    starter: int | None = None  # the condor_starter's pid (PREPARE_JOB's parent)
    evicting: bool = False  # EVICT_CLAIM came before its end
    killed: str = ""  # why the agent killed it (max_runtime), if it did
    end: TaskEnd | None = None
    secret: str = field(default="", repr=False)  # the hooks' proof that they name this task

    def fits(self, cpus: int, memory: int, disk: int) -> bool:
        return self.cpus <= cpus and self.memory <= memory and self.disk <= disk


@dataclass(eq=False)
class HandoffLedger:
    """The tasks between a glidein's agent and its startd, and the startd's room."""

    reply_timeout: float = 60.0
    start_timeout: float = 300.0
    room_ttl: float = 300.0
    max_rejections: int = 3
    tasks: dict[Key, HandedTask] = field(init=False, default_factory=dict)
    free: tuple[int, int, int] | None = field(init=False, default=None)  # cpus, memory MB, disk KiB
    seen_at: float = field(init=False, default=0.0)
    asking: int = field(init=False, default=0)  # lanes asking for a task now
    asks: int = field(init=False, default=0)  # asks begun, ever (a fetch waits for those it caused)
    closed: bool = field(init=False, default=False)
    default_memory: int = field(init=False, default=0)  # MB per CPU, from the slots' totals

    # --- room -----------------------------------------------------------------------------

    def room(self, now: float) -> int:
        """CPUs a new task could get now (0 when closed or when no fetch was seen lately)."""
        if self.closed or self.free is None or now - self.seen_at > self.room_ttl:
            return 0
        pending = sum(h.cpus for h in self.tasks.values() if h.stage in _PENDING)
        return max(0, self.free[0] - pending - self.asking)

    def begin_ask(self, now: float) -> bool:
        """A lane may ask for one task (it holds one CPU of room until :meth:`end_ask`)."""
        if self.room(now) <= 0:
            return False
        self.asking += 1
        self.asks += 1
        return True

    def end_ask(self) -> None:
        self.asking = max(0, self.asking - 1)

    # --- the lanes' side ------------------------------------------------------------------

    def offer(self, handoff: HandedTask, now: float) -> bool:
        """A lane's task waits for a slot; False when closed (the lane keeps it)."""
        if self.closed or handoff.key in self.tasks:
            return False
        handoff.stage, handoff.since = Stage.OFFERED, now
        self.tasks[handoff.key] = handoff
        return True

    def withdraw(self, key: Key, why: str) -> bool:
        """Cancel a task no startd has (the lane is stopping); False if the startd has it."""
        handoff = self.tasks.get(key)
        if handoff is None or handoff.stage is not Stage.OFFERED:
            return False
        self._end(handoff, TaskEnd(EndKind.CANCELLED, detail=why), handoff.since)
        return True

    def finish(self, key: Key) -> TaskEnd | None:
        """The end of an ENDED task, forgotten here (None while it is not over)."""
        handoff = self.tasks.get(key)
        if handoff is None or handoff.end is None:
            return None
        del self.tasks[key]
        return handoff.end

    def close(self, why: str, now: float) -> list[Key]:
        """No more tasks (retiring, stopping): cancel those not handed out; their keys."""
        self.closed = True
        cancelled = [k for k, h in self.tasks.items() if h.stage is Stage.OFFERED]
        for key in cancelled:
            self._end(self.tasks[key], TaskEnd(EndKind.CANCELLED, detail=why), now)
        return cancelled

    # --- the hooks' side ------------------------------------------------------------------

    def take(self, slot: SlotView, now: float) -> HandedTask | None:
        """FETCH_WORK from a free slot: the oldest offered task that fits it, now HANDED."""
        self.free, self.seen_at = (slot.cpus, slot.memory, slot.disk), now
        if slot.total_cpus > 0:
            self.default_memory = max(1, slot.total_memory // slot.total_cpus)
        if self.closed:
            return None
        offered = [h for h in self.tasks.values() if h.stage is Stage.OFFERED]
        for handoff in sorted(offered, key=lambda h: h.since):
            if handoff.fits(slot.cpus, slot.memory, slot.disk):
                handoff.stage, handoff.since = Stage.HANDED, now
                # The slot's next ad will not have these any more; meanwhile count them here.
                self.free = (
                    slot.cpus - handoff.cpus,
                    slot.memory - handoff.memory,
                    slot.disk - handoff.disk,
                )
                return handoff
        return None

    def fitting(self) -> bool:
        """Is an offered task small enough for what the last fetch saw?"""
        if self.free is None:
            return False
        return any(h.stage is Stage.OFFERED and h.fits(*self.free) for h in self.tasks.values())

    def replied(self, key: Key, accepted: bool, now: float) -> None:
        """REPLY_FETCH: the startd took it, or refused it (back to offered, or cancelled after
        ``max_rejections``: the lane gives it back)."""
        handoff = self.tasks.get(key)
        if handoff is None or handoff.stage is not Stage.HANDED:
            return  # late, repeated, or PREPARE_JOB came first
        if accepted:
            handoff.stage, handoff.since = Stage.ACCEPTED, now
            return
        self._give_back_room(handoff)
        handoff.stage, handoff.since = Stage.OFFERED, now
        handoff.rejections += 1
        if handoff.rejections >= self.max_rejections:
            why = f"the startd refused it {handoff.rejections} times"
            self._end(handoff, TaskEnd(EndKind.CANCELLED, detail=why), now)

    def secret_ok(self, key: Key, secret: object) -> bool:
        """Does ``secret`` prove a hook call about ``key`` (the task's hand-off secret)?"""
        handoff = self.tasks.get(key)
        if handoff is None or not handoff.secret or not isinstance(secret, str):
            return False
        return hmac.compare_digest(handoff.secret.encode(), secret.encode())

    def starter_of(self, key: Key) -> int | None:
        """The condor_starter that runs the task (after PREPARE_JOB), or None."""
        handoff = self.tasks.get(key)
        return None if handoff is None else handoff.starter

    def prepared(self, key: Key, starter: int, now: float) -> bool:
        """PREPARE_JOB: its starter is about to run it.  False (the job must not run) unless
        the task was handed to the startd and has not ended, and that starter runs no other
        task (a starter runs one job: a job's own processes cannot claim another task)."""
        handoff = self.tasks.get(key)
        if handoff is None or handoff.stage not in (Stage.HANDED, Stage.ACCEPTED):
            return False
        if any(h.starter == starter and h.stage in _CARVED for h in self.tasks.values()):
            return False
        handoff.stage, handoff.since, handoff.starter = Stage.RUNNING, now, starter
        return True

    def evicting(self, key: Key) -> None:
        """EVICT_CLAIM: the startd evicts its claim (after a normal end too: then ignored)."""
        handoff = self.tasks.get(key)
        if handoff is not None and handoff.stage in (Stage.HANDED, Stage.ACCEPTED, Stage.RUNNING):
            handoff.evicting = True

    def killed(self, key: Key, why: str) -> None:
        """The agent killed the job itself (max_runtime): its end is the task's failure."""
        handoff = self.tasks.get(key)
        if handoff is not None:
            handoff.killed = why

    def exited(
        self,
        key: Key,
        reason: str,
        exit_code: int | None,
        signal: int | None,
        now: float,
    ) -> None:
        """JOB_EXIT: ``reason`` is the starter's (exit, evict, remove, hold)."""
        handoff = self.tasks.get(key)
        if handoff is None or handoff.stage in (Stage.OFFERED, Stage.ENDED):
            return
        if handoff.killed:
            code = -(signal or 9) if exit_code is None else exit_code
            end = TaskEnd(EndKind.EXITED, code, handoff.killed)
        elif reason != "exit" or handoff.evicting:
            end = TaskEnd(EndKind.EVICTED, detail=f"HTCondor ended the job ({reason})")
        elif signal is not None:
            end = TaskEnd(EndKind.EXITED, -signal, f"killed by signal {signal}")
        elif exit_code is None:
            end = TaskEnd(EndKind.EVICTED, detail="the job ended without an exit code")
        else:
            end = TaskEnd(EndKind.EXITED, exit_code)
        self._end(handoff, end, now)

    def tick(self, now: float, alive: Callable[[int], bool]) -> list[Key]:
        """Time passes: a verdict that never came (the task is offered again), a start that
        never came, a starter that vanished without JOB_EXIT (evicted).  The keys that changed."""
        changed = []
        for key, handoff in list(self.tasks.items()):
            waited = now - handoff.since
            if handoff.stage is Stage.HANDED and waited > self.reply_timeout:
                # No PREPARE_JOB either, so no starter runs it: it may go out again.
                self._give_back_room(handoff)
                handoff.stage, handoff.since = Stage.OFFERED, now
            elif handoff.stage is Stage.ACCEPTED and waited > self.start_timeout:
                why = f"accepted but not started within {self.start_timeout:.0f} s"
                self._end(handoff, TaskEnd(EndKind.EVICTED, detail=why), now)
            elif (
                handoff.stage is Stage.RUNNING
                and handoff.starter is not None
                and not alive(handoff.starter)
            ):
                why = "its condor_starter ended without JOB_EXIT reaching the agent (StarterLog)"
                self._end(handoff, TaskEnd(EndKind.EVICTED, detail=why), now)
            else:
                continue
            changed.append(key)
        return changed

    def _give_back_room(self, handoff: HandedTask) -> None:
        if self.free is not None:
            cpus, memory, disk = self.free
            self.free = (cpus + handoff.cpus, memory + handoff.memory, disk + handoff.disk)

    def _end(self, handoff: HandedTask, end: TaskEnd, now: float) -> None:
        if handoff.stage in _CARVED:
            # Its dynamic slot goes back to the partitionable slot as soon as its claim ends
            # (the hook gives a dynamic slot no more work): count the room now, so that the lane
            # asks for its next task while the slot is released, not a fetch period later.
            self._give_back_room(handoff)
        handoff.stage, handoff.since, handoff.end = Stage.ENDED, now, end


# Offered tasks hold room not yet taken from the slot; a handed one was taken from ``free``.
_PENDING = (Stage.OFFERED,)
_CARVED = (Stage.HANDED, Stage.ACCEPTED, Stage.RUNNING)
