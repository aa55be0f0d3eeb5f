"""The ClassAds a task and a pilot are matched with (Hasham 2011 §IV-E), their plain values for the
compiled evaluator (``compiled``), and the matcher's match groups: the queued tasks that share one
MatchSpec (DIRAC's task queues), each evaluated once per pilot.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from glidein_ext import classads
from glidein_ext.tq.client.limits import is_costly
from glidein_ext.tq.models import MatchSpec, PilotInfo, QueuedTask
from glidein_ext.tq.service.matching import batched, classad_values, compiled

# The ClassAd attribute each record field is matched as, beside the record's own attributes
# (Hasham 2011 §IV-E): a task's requests, a pilot's place and resources.
_TASK_ATTRIBUTES = (
    ("RequestCpus", "request_cpus"),
    ("RequestMemory", "request_memory"),
    ("RequestDisk", "request_disk"),
    ("MaxRunTime", "max_runtime"),
)
_PILOT_ATTRIBUTES = (
    ("Site", "site"),
    ("Host", "host"),
    ("SE", "se"),
    ("Cpus", "cpus"),
    ("Memory", "memory"),
    ("Disk", "disk"),
)


def _attributes(
    record: MatchSpec | PilotInfo, named: tuple[tuple[str, str], ...]
) -> dict[str, classads.Scalar]:
    """The record's own attributes and, by ``named``, its fields as ClassAd attributes."""
    attrs: dict[str, classads.Scalar] = dict(record.attributes)
    attrs.update((attribute, getattr(record, name)) for attribute, name in named)
    return attrs


def task_ad(spec: MatchSpec) -> classads.ClassAd:
    """The ClassAd a task is matched with: its MatchSpec (Hasham 2011 §IV-E)."""
    attrs = _attributes(spec, _TASK_ATTRIBUTES)
    return classads.make_ad(attrs, {"Requirements": spec.requirements, "Rank": spec.rank})


def task_values(spec: MatchSpec) -> dict[str, classad_values.Value]:
    """The plain attributes of ``task_ad(spec)``, by lower-case name (``classad_values``)."""
    return classad_values.lower_ad(_attributes(spec, _TASK_ATTRIBUTES))


def pilot_values(pilot: PilotInfo) -> dict[str, classad_values.Value]:
    """The plain attributes of ``pilot_ad(pilot)``, by lower-case name (``classad_values``)."""
    return classad_values.lower_ad(_attributes(pilot, _PILOT_ATTRIBUTES))


def pilot_ad(pilot: PilotInfo) -> classads.ClassAd:
    """The ClassAd a pilot is matched with: what it registered (Hasham 2011 §IV-E: Host, SE,
    site)."""
    attrs = _attributes(pilot, _PILOT_ATTRIBUTES)
    return classads.make_ad(attrs, {"Requirements": pilot.requirements, "Rank": pilot.rank})


@dataclass(frozen=True)
class Verdict:
    """One group's answer for one pilot: matched, and the two Ranks."""

    matched: bool
    pilot_rank: float = 0.0
    task_rank: float = 0.0


NO_MATCH = Verdict(False)


def costly(*texts: str) -> bool:
    """Whether an expression among ``texts`` makes a costly call (regexp or its kin, eval, a
    function not known to be cheap), counted on its tokens (``tq.client.limits.costly_calls``)."""
    return is_costly(*texts)


class MatchGroup:
    """Queued tasks with one MatchSpec, kept in order of (-priority, task id)."""

    def __init__(self, spec: MatchSpec) -> None:
        self.spec = spec
        self.ad = task_ad(spec)
        self.costly = costly(spec.requirements, spec.rank)
        self.order: list[tuple[int, int]] = []
        self._text: str | None = None
        self.values = task_values(spec)
        self.requirements = compiled.compile_expr(spec.requirements)
        self.rank = compiled.compile_expr(spec.rank)
        if not classad_values.plain(self.values):
            self.requirements = self.rank = None  # classad2's own integers: left to it
        self.batch: batched.Batch | None = None  # the columns it is evaluated in, if any
        self.row = 0

    @property
    def text(self) -> str:
        """The group's ad as ClassAd text (for a worker process)."""
        if self._text is None:
            self._text = str(self.ad)
        return self._text

    def add(self, task: QueuedTask) -> None:
        bisect.insort(self.order, (-task.priority, task.task_id))

    def remove(self, task: QueuedTask) -> None:
        item = (-task.priority, task.task_id)
        index = bisect.bisect_left(self.order, item)
        if index < len(self.order) and self.order[index] == item:
            del self.order[index]

    def evaluate(
        self, pilot: PilotInfo, values: dict[str, classad_values.Value], ad: classads.ClassAd
    ) -> Verdict:
        """The group's verdict for one pilot (its plain attributes ``values``, its ``ad``):
        compiled where both sides' expressions are in the subset, else classad2."""
        mine, theirs = compiled.compile_expr(pilot.requirements), compiled.compile_expr(pilot.rank)
        if not classad_values.plain(values):
            mine = None
        if None not in (self.requirements, self.rank, mine, theirs):
            assert self.requirements and self.rank and mine and theirs
            task_, pilot_ = self.values, values
            if not (
                classad_values.matches(self.requirements.evaluate(task_, pilot_))
                and classad_values.matches(mine.evaluate(pilot_, task_))
            ):
                return NO_MATCH
            return Verdict(
                True,
                classad_values.rank_value(theirs.evaluate(pilot_, task_)),
                classad_values.rank_value(self.rank.evaluate(task_, pilot_)),
            )
        if classads.symmetric_match(self.ad, ad):
            return Verdict(True, classads.rank(ad, self.ad), classads.rank(self.ad, ad))
        return NO_MATCH
