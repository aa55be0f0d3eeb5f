"""How many CPUs the site must free (pure; Sfiligoi 2013, "The semi-automatic solution": "when share
imbalance is detected", and "The fully automated solution": the negotiator knows who must go).

Two demands:
- fixed: free N CPUs for an owner group (its own pilots are never victims for it);
- fair share: an owner's idle jobs against its fair share, read from the negotiator's effective
  priorities.  HTCondor gives users shares inversely proportional to their effective priority,
  so owner u's share of C CPUs among the users S that use or want CPUs is
  C * (1/p_u) / sum_{v in S} (1/p_v); the need is
  max(0, min(idle CPUs of u, share - CPUs u uses now) - free CPUs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from glidein_ext.site.victims import BEST_PRIORITY


@dataclass(frozen=True)
class Demand:
    """What the controller is configured to reclaim, and for whom."""

    owner: str
    cpus: int | None = None  # fixed: free this many CPUs for owner
    fair_share: bool = False  # or: reclaim up to owner's fair share

    def __post_init__(self) -> None:
        if (self.cpus is None) == (not self.fair_share):
            raise ValueError("a demand is either a number of CPUs or the owner's fair share")


def belongs_to(owner: str, group: str) -> bool:
    """``owner`` is ``group`` itself, a subgroup (group.sub) or a user in it (group.user@dom)."""
    return owner == group or owner.startswith(group + ".") or owner.split("@", 1)[0] == group


def fair_share_cpus(
    owner: str, total_cpus: int, userprio: Mapping[str, float], active: set[str]
) -> float:
    """owner's share of ``total_cpus`` among the ``active`` users (owner included)."""
    users = active | {owner}
    weights = {u: 1.0 / max(userprio.get(u, BEST_PRIORITY), BEST_PRIORITY) for u in users}
    return total_cpus * weights[owner] / sum(weights.values())


def cpus_needed(
    demand: Demand,
    *,
    total_cpus: int,
    free_cpus: int,
    in_use: Mapping[str, int],
    idle: Mapping[str, int],
    userprio: Mapping[str, float],
) -> int:
    """The CPUs to reclaim now for ``demand``."""
    if demand.cpus is not None:
        return max(demand.cpus, 0)
    owner = demand.owner
    active = {u for u, n in in_use.items() if n > 0} | {u for u, n in idle.items() if n > 0}
    share = fair_share_cpus(owner, total_cpus, userprio, active)
    wanted = min(idle.get(owner, 0), int(share) - in_use.get(owner, 0))
    return max(wanted - free_cpus, 0)
