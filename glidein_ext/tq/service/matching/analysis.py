"""Why a task matches no pilot, condition by condition, as ``condor_q -better-analyze`` says it for
an idle job: each clause of the task's Requirements (its top-level ``&&`` conjunction), the
pilots' Requirements against the task, and each resource (RequestCpus, RequestMemory,
RequestDisk; MaxRunTime within the pilot's remaining life, Hasham 2011 §IV-E), each with how many
of the live pilots it rejects and the nearest value they offer.

Pure and bounded: the caller passes at most ``MAX_PILOTS`` pilots (it says how many it left out);
each clause is evaluated as the matcher does (``tq.service.matching.match_groups``: the compiled
subset, else classad2 through ``glidein_ext.classads``), in the task's match ad as MY with the
pilot's as TARGET; a clause or a pilot's Requirements that calls a costly function (regexp and its
kin) is not evaluated here, as the service's matcher defers them (``tq.service.matching.costly``).
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from glidein_ext import classads
from glidein_ext.errors import ClassAdError
from glidein_ext.timefmt import format_duration
from glidein_ext.tq.models import MatchSpec, PilotInfo
from glidein_ext.tq.service.matching import classad_values, compiled
from glidein_ext.tq.service.matching.match_groups import (
    costly,
    pilot_ad,
    pilot_values,
    task_ad,
    task_values,
)

MAX_PILOTS = 500  # live pilots examined for one task (the first by id)
MAX_CLAUSES = 20  # clauses of one Requirements analysed; the rest are one clause
MAX_PILOT_REQUIREMENTS = 5  # distinct pilots' Requirements shown

# ``Attr OP literal`` (an attribute the pilot's ad may carry), for the nearest value offered.
_COMPARISON = re.compile(
    r"^\s*(?:(?:TARGET|MY)\.)?([A-Za-z_][A-Za-z0-9_]*)\s*(>=|<=|==|!=|=\?=|=!=|>|<)\s*(.+?)\s*$"
)


@dataclass(frozen=True)
class Condition:
    """One condition and the pilots it rejects: ``kind`` is ``requirements`` (a clause of the
    task's), ``pilot-requirements`` (a pilots' Requirements against the task) or ``resource``;
    ``rejects`` is None when it was not evaluated here (``note`` says why)."""

    kind: str
    text: str
    rejects: int | None
    nearest: str | None = None
    note: str | None = None

    def line(self, examined: int) -> str:
        if self.rejects is None:
            return f"{self.text}: {self.note}"
        said = f"{self.text}: rejects {self.rejects} of {examined}"
        return f"{said}; {self.nearest}" if self.nearest and self.rejects else said


@dataclass(frozen=True)
class Analysis:
    """A task's conditions over ``examined`` of ``live`` pilots; ``matching``: the pilots that
    meet them all."""

    live: int
    examined: int
    matching: int
    conditions: tuple[Condition, ...]

    def lines(self) -> list[str]:
        return [c.line(self.examined) for c in self.conditions]

    def short(self) -> str:
        """The condition that rejects the most pilots, in one line (``tq status --tasks``)."""
        worst = max(
            (c for c in self.conditions if c.rejects),
            key=lambda c: c.rejects or 0,
            default=None,
        )
        if worst is None:
            return f"{self.matching} of {self.examined} live pilot(s) may run it"
        return worst.line(self.examined)

    def to_json(self) -> dict[str, Any]:
        return {
            "live": self.live,
            "examined": self.examined,
            "matching": self.matching,
            "conditions": [dataclasses.asdict(c) for c in self.conditions],
        }


def split_conjunction(text: str) -> list[str]:
    """The clauses of a top-level ``&&`` conjunction (outer parentheses dropped); the whole text
    as one clause when its top level has ``||`` or ``? :`` (``&&`` binds tighter than both) or it
    does not scan (an unterminated string, unbalanced parentheses)."""
    text = _unwrap(text.strip())
    cuts: list[int] = []
    depth = 0
    i = 0
    while i < len(text):
        char = text[i]
        if char == '"':
            end = _string_end(text, i)
            if end < 0:
                return [text]
            i = end + 1
            continue
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth < 0:
                return [text]
        elif depth == 0 and (text.startswith("||", i) or char == "?"):
            return [text]
        elif depth == 0 and text.startswith("&&", i):
            cuts.append(i)
            i += 2
            continue
        i += 1
    if depth != 0 or not cuts:
        return [text]
    parts = [
        text[a:b] for a, b in zip([0, *(c + 2 for c in cuts)], [*cuts, len(text)], strict=True)
    ]
    clauses = [part.strip() for part in parts]
    if any(not clause for clause in clauses):
        return [text]
    if len(clauses) > MAX_CLAUSES:
        clauses = [*clauses[: MAX_CLAUSES - 1], " && ".join(clauses[MAX_CLAUSES - 1 :])]
    return clauses


def _string_end(text: str, start: int) -> int:
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i
        i += 1
    return -1


def _unwrap(text: str) -> str:
    """``(a && b)`` -> ``a && b`` while one pair of parentheses holds all of it."""
    while text.startswith("(") and text.endswith(")"):
        depth = 0
        for i, char in enumerate(text):
            depth += char == "("
            depth -= char == ")"
            if depth == 0 and i < len(text) - 1:
                return text
        text = text[1:-1].strip()
    return text


def analyse(spec: MatchSpec, pilots: Sequence[PilotInfo], live: int, now: float) -> Analysis:
    """The task's conditions over ``pilots`` (at most ``MAX_PILOTS`` of the ``live`` ones)."""
    classads.matchmaking_semantics()  # before any ad is parsed, as the Matcher does
    pilots = list(pilots)[:MAX_PILOTS]
    passing = {p.pilot_id for p in pilots}
    conditions: list[Condition] = []
    values = {p.pilot_id: pilot_values(p) for p in pilots}
    for clause in split_conjunction(spec.requirements):
        condition, rejected = _clause(spec, clause, pilots, values)
        conditions.append(condition)
        passing -= rejected
    for condition, rejected in _pilots_requirements(spec, pilots, values):
        conditions.append(condition)
        passing -= rejected
    for condition, rejected in _resources(spec, pilots, now):
        conditions.append(condition)
        passing -= rejected
    return Analysis(live, len(pilots), len(passing), tuple(conditions))


def _clause(
    spec: MatchSpec,
    clause: str,
    pilots: Sequence[PilotInfo],
    values: dict[int, dict[str, classad_values.Value]],
) -> tuple[Condition, set[int]]:
    if costly(clause):
        return Condition("requirements", clause, None, note="costly: not evaluated here"), set()
    mine = task_values(spec)
    code = compiled.compile_expr(clause) if classad_values.plain(mine) else None
    ad = None
    rejected: set[int] = set()
    for pilot in pilots:
        theirs = values[pilot.pilot_id]
        if code is not None and classad_values.plain(theirs):
            ok = classad_values.matches(code.evaluate(mine, theirs))
        else:
            try:
                ad = ad or task_ad(dataclasses.replace(spec, requirements=clause))
            except ClassAdError:
                return Condition("requirements", clause, None, note="does not parse"), set()
            anyone = dataclasses.replace(pilot, requirements="true")
            ok = classads.symmetric_match(ad, pilot_ad(anyone))
        if not ok:
            rejected.add(pilot.pilot_id)
    nearest = _nearest(clause, [values[p.pilot_id] for p in pilots if p.pilot_id in rejected])
    return Condition("requirements", clause, len(rejected), nearest), rejected


def _nearest(clause: str, rejecting: list[dict[str, classad_values.Value]]) -> str | None:
    """What the rejecting pilots offer for ``Attr OP value``: the largest (``>``), the smallest
    (``<``), or the values they have (``==``)."""
    found = _COMPARISON.match(clause)
    if found is None or not rejecting:
        return None
    name, op = found.group(1), found.group(2)
    offered = [ad.get(name.lower()) for ad in rejecting]
    numbers = [v for v in offered if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if op in (">", ">=") and numbers:
        return f"the largest pilot has {_number(max(numbers))}"
    if op in ("<", "<=") and numbers:
        return f"the smallest pilot has {_number(min(numbers))}"
    shown = Counter("undefined" if v is None else _shown(v) for v in offered)
    if op in ("==", "=?=", "!=", "=!="):
        top = ", ".join(f"{value} ({n})" for value, n in shown.most_common(3))
        more = f" and {len(shown) - 3} more" if len(shown) > 3 else ""
        return f"the pilots have {name} {top}{more}"
    return None


def _shown(value: object) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return _number(value)
    return str(value)


def _number(value: float) -> str:
    """``8,000``; ``0.5``."""
    if isinstance(value, int) or value.is_integer():
        return f"{int(value):,}"
    return f"{value:,.6g}"


def _pilots_requirements(
    spec: MatchSpec,
    pilots: Sequence[PilotInfo],
    values: dict[int, dict[str, classad_values.Value]],
) -> list[tuple[Condition, set[int]]]:
    """The pilots' own Requirements against the task, one condition per distinct text that
    rejects it (the most rejecting first), all the others together."""
    mine = task_values(spec)
    ad = None
    by_text: dict[str, set[int]] = {}
    deferred = 0
    for pilot in pilots:
        if pilot.requirements.strip().lower() == "true":
            continue
        if costly(pilot.requirements):
            deferred += 1
            continue
        theirs = values[pilot.pilot_id]
        code = compiled.compile_expr(pilot.requirements)
        if code is not None and classad_values.plain(theirs) and classad_values.plain(mine):
            ok = classad_values.matches(code.evaluate(theirs, mine))
        else:
            try:
                ad = ad or task_ad(dataclasses.replace(spec, requirements="true"))
                ok = classads.symmetric_match(ad, pilot_ad(pilot))
            except ClassAdError:
                ok = False
        if not ok:
            by_text.setdefault(pilot.requirements, set()).add(pilot.pilot_id)
    found: list[tuple[Condition, set[int]]] = []
    ordered = sorted(by_text.items(), key=lambda item: (-len(item[1]), item[0]))
    for text, rejected in ordered[:MAX_PILOT_REQUIREMENTS]:
        found.append(
            (
                Condition("pilot-requirements", f"the pilots' Requirements {text}", len(rejected)),
                rejected,
            )
        )
    rest = set().union(*(ids for _, ids in ordered[MAX_PILOT_REQUIREMENTS:]))
    if rest:
        found.append(
            (Condition("pilot-requirements", "the other pilots' Requirements", len(rest)), rest)
        )
    if not found:
        found.append((Condition("pilot-requirements", "the pilots' Requirements", 0), set()))
    if deferred:
        found.append(
            (
                Condition(
                    "pilot-requirements",
                    f"the Requirements of {deferred} pilot(s)",
                    None,
                    note="costly: not evaluated here",
                ),
                set(),
            )
        )
    return found


def _resources(
    spec: MatchSpec, pilots: Sequence[PilotInfo], now: float
) -> list[tuple[Condition, set[int]]]:
    """RequestCpus, RequestMemory (MB), RequestDisk (MB) within the pilot's, MaxRunTime within
    its remaining life."""
    found: list[tuple[Condition, set[int]]] = []
    asks: tuple[tuple[str, int, Callable[[PilotInfo], int]], ...] = (
        ("request_cpus", spec.request_cpus, lambda p: p.cpus),
        ("request_memory", spec.request_memory, lambda p: p.memory),
        ("request_disk", spec.request_disk, lambda p: p.disk),
    )
    for label, asked, offered in asks:
        rejected = {p.pilot_id for p in pilots if asked > offered(p)}
        largest = max((offered(p) for p in pilots), default=0)
        unit = "" if label == "request_cpus" else " MB"
        found.append(
            (
                Condition(
                    "resource",
                    f"{label} {_number(asked)}{unit}",
                    len(rejected),
                    f"the largest pilot has {_number(largest)}{unit}",
                ),
                rejected,
            )
        )
    rejected = {p.pilot_id for p in pilots if spec.max_runtime > p.remaining(now)}
    longest = max((p.remaining(now) for p in pilots), default=0.0)
    left = "no end" if longest == float("inf") else f"{format_duration(int(max(longest, 0)))} left"
    found.append(
        (
            Condition(
                "resource",
                f"max_runtime {format_duration(spec.max_runtime)} within the pilot's life",
                len(rejected),
                f"the longest-lived pilot has {left}",
            ),
            rejected,
        )
    )
    return found
