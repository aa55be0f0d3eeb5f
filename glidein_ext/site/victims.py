"""Choosing the cooperative victims (pure; Sfiligoi 2013, "Selecting the cooperative victim" and
"Additional goodies - Current state").

Input: the pilots (slot, owner, CPUs, PILOT_* values), the users' effective priorities (the
negotiator's numbers: higher is less privileged), the CPUs needed and the policy.  Rules:

1. Pilots with a stale heartbeat are listed apart as hard-kill candidates: they are not expected
   to cooperate, and do not count as draining.
2. Pilots already draining (CAN_POSTPONE_LAST_JOB false, or the site already asked) count toward
   the need first; if they cover it, no new victim is chosen.
3. Otherwise victims come from the least privileged user first (worst effective priority).  A user
   the negotiator does not know counts as the most privileged (priority 0.5, HTCondor's best):
   the site does not evict what it cannot rank.
4. Within a user, by the policy key: ``waste`` = ADD_FINAL_EXP_WASTE1k ascending, ``completion`` =
   LAST_EXP_JOB_END ascending (an idle pilot, USED_FRACTION1k = 0, completes now); a pilot
   without the value comes last.  ``cache`` = CACHED_INPUT_NEEDED_MB ascending (the MB of its
   cache that tasks still to run will read: vacating the pilot makes the storage element serve
   them again), ties by the ``completion`` key.  Ties: PRIORITY_FACTOR ascending (higher means
   the owner wants to keep it; missing = 0), then slot name.
5. Stop as soon as the chosen CPUs cover what the draining pilots do not.

Every choice carries a one-line reason.

``ORDERS`` is the one list of policies (the enum names them): the command lines' choices and help,
the simulator and the benches take theirs from it, so a new policy is one ``Policy`` member and
one ``Order`` there.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from glidein_ext.site.pilots import Pilot
from glidein_ext.timefmt import format_duration, format_time

BEST_PRIORITY = 0.5  # HTCondor's minimum effective user priority


class Policy(Enum):
    WASTE = "waste"
    COMPLETION = "completion"
    CACHE = "cache"


@dataclass(frozen=True)
class Order:
    """How a policy orders one user's pilots: ascending by ``key`` (None: unknown, last), the
    pilot ad's ``attribute`` it reads (for the reasons), then by the ``then`` policy's key."""

    attribute: str
    key: Callable[[Pilot], float | None]
    summary: str  # one line, for --help
    then: Policy | None = None
    when: bool = False  # the key is a time (epoch seconds): shown as one in the reasons


def _waste(pilot: Pilot) -> float | None:
    return None if pilot.waste1k is None else float(pilot.waste1k)


def _completion(pilot: Pilot) -> float | None:
    if pilot.last_exp_job_end is not None:
        return float(pilot.last_exp_job_end)
    return 0.0 if pilot.used1k == 0 else None  # an idle pilot completes now


def _cache(pilot: Pilot) -> float | None:
    return None if pilot.cached_needed_mb is None else float(pilot.cached_needed_mb)


# The policies: the only place a policy's order is defined.
ORDERS: dict[Policy, Order] = {
    Policy.WASTE: Order("ADD_FINAL_EXP_WASTE1k", _waste, "the least work lost first"),
    Policy.COMPLETION: Order(
        "LAST_EXP_JOB_END", _completion, "the earliest to finish first", when=True
    ),
    Policy.CACHE: Order(
        "CACHED_INPUT_NEEDED_MB",
        _cache,
        "the least cached input still needed first, then completion",
        then=Policy.COMPLETION,
    ),
}
POLICY_NAMES = tuple(policy.value for policy in ORDERS)
DEFAULT_POLICY = Policy.WASTE


def policies_help() -> str:
    """``name (ATTRIBUTE): summary; ...`` for a command line's help."""
    return "; ".join(
        f"{policy.value} ({order.attribute}): {order.summary}" for policy, order in ORDERS.items()
    )


@dataclass(frozen=True)
class Choice:
    pilot: Pilot
    reason: str


@dataclass(frozen=True)
class Selection:
    cpus_needed: int
    policy: Policy
    victims: tuple[Choice, ...] = field(default_factory=tuple)
    draining: tuple[Choice, ...] = field(default_factory=tuple)
    hard_kill: tuple[Choice, ...] = field(default_factory=tuple)

    @property
    def cpus_draining(self) -> int:
        return sum(c.pilot.cpus for c in self.draining)

    @property
    def cpus_chosen(self) -> int:
        return sum(c.pilot.cpus for c in self.victims)

    @property
    def satisfied(self) -> bool:
        return self.cpus_draining + self.cpus_chosen >= self.cpus_needed


def priority_of(owner: str, userprio: Mapping[str, float]) -> float:
    return userprio.get(owner, BEST_PRIORITY)


def policy_value(pilot: Pilot, policy: Policy) -> float:
    """The pilot's key under ``policy``; +inf when unknown (it sorts last)."""
    value = ORDERS[policy].key(pilot)
    return math.inf if value is None else value


def tie_value(pilot: Pilot, policy: Policy) -> float:
    """The second key: the ``then`` policy's (``cache``: ``completion``); 0 without one."""
    then = ORDERS[policy].then
    return 0.0 if then is None else policy_value(pilot, then)


def sort_key(
    pilot: Pilot, userprio: Mapping[str, float], policy: Policy
) -> tuple[float, float, float, int, str]:
    return (
        -priority_of(pilot.owner, userprio),
        policy_value(pilot, policy),
        tie_value(pilot, policy),
        pilot.priority_factor or 0,
        pilot.slot,
    )


def _shown(value: float, order: Order, now: int) -> str:
    """A key's value in a reason: a time as a date and how far from now (an idle pilot's
    completion, 0, is now), else the number."""
    if math.isinf(value):
        return "unknown"
    if not order.when:
        return str(int(value))
    return "now (idle)" if value == 0 else format_time(int(value), now)


def _describe_key(pilot: Pilot, policy: Policy, now: int) -> str:
    order = ORDERS[policy]
    text = f"{order.attribute} {_shown(policy_value(pilot, policy), order, now)}"
    if order.then is not None:
        then = ORDERS[order.then]
        text += f", {then.attribute} {_shown(policy_value(pilot, order.then), then, now)}"
    return f"{text}, PRIORITY_FACTOR {pilot.priority_factor or 0}"


def choose_victims(
    pilots: Iterable[Pilot],
    userprio: Mapping[str, float],
    cpus_needed: int,
    policy: Policy,
    now: int | None = None,
) -> Selection:
    """Apply the rules of the module docstring; ``now`` (default: the clock) for the times the
    reasons show."""
    now = int(time.time()) if now is None else now
    everyone = sorted(pilots, key=lambda p: p.slot)
    hard_kill = tuple(
        Choice(p, f"heartbeat {_age(p.heartbeat_age)}: stale, hard-kill candidate")
        for p in everyone
        if p.stale
    )
    live = [p for p in everyone if not p.stale]
    draining: list[Choice] = []
    covered = 0
    for p in live:
        if p.draining:
            covered += p.cpus
            why = "CAN_POSTPONE_LAST_JOB false" if p.can_postpone is False else "site asked"
            draining.append(
                Choice(p, f"already draining ({why}): {p.cpus} CPUs, {covered}/{cpus_needed}")
            )
    victims: list[Choice] = []
    if covered < cpus_needed:
        candidates = sorted(
            (p for p in live if not p.draining), key=lambda p: sort_key(p, userprio, policy)
        )
        owners = sorted({p.owner for p in candidates}, key=lambda o: -priority_of(o, userprio))
        for p in candidates:
            if covered >= cpus_needed:
                break
            covered += p.cpus
            rank = owners.index(p.owner) + 1
            victims.append(
                Choice(
                    p,
                    f"user {p.owner} (priority {priority_of(p.owner, userprio):g}, "
                    f"least-privileged rank {rank} of {len(owners)}); "
                    f"{_describe_key(p, policy, now)}; "
                    f"{p.cpus} CPUs, {covered}/{cpus_needed}",
                )
            )
    return Selection(cpus_needed, policy, tuple(victims), tuple(draining), hard_kill)


def _age(seconds: int | None) -> str:
    return "of unknown age" if seconds is None else f"{format_duration(seconds)} old"
