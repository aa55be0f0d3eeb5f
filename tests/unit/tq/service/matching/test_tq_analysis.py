"""Why a task matches no pilot, clause by clause (``condor_q -better-analyze``): the top-level
conjunction split, each clause's rejections and the nearest value offered, the pilots'
Requirements, the resources and the remaining life, costly expressions left unevaluated."""

from __future__ import annotations

import pytest

from glidein_ext.tq.models import MatchSpec, PilotInfo
from glidein_ext.tq.service.matching.analysis import MAX_PILOTS, analyse, split_conjunction


@pytest.mark.parametrize(
    ("text", "clauses"),
    [
        ("true", ["true"]),
        ('Memory > 100000 && Site == "T1"', ["Memory > 100000", 'Site == "T1"']),
        ("(a && (b || c)) ", ["a", "(b || c)"]),
        ("a && b || c", ["a && b || c"]),  # || binds looser: one clause
        ("a ? b && c : d", ["a ? b && c : d"]),
        ('Name == "x && y" && z', ['Name == "x && y"', "z"]),
        ('Name == "a\\"&&" && z', ['Name == "a\\"&&"', "z"]),
        ("(a) && (b)", ["(a)", "(b)"]),
        ("a && ", ["a &&"]),  # a fragment: left whole
        ("(a && b", ["(a && b"]),
        ('"unterminated && x', ['"unterminated && x']),
    ],
)
def test_the_top_level_conjunction_is_split(text: str, clauses: list[str]) -> None:
    assert split_conjunction(text) == clauses


def _pilots(n: int, **kw: object) -> list[PilotInfo]:
    base: dict[str, object] = {"site": "T2_XY", "cpus": 8, "memory": 8000, "disk": 20000}
    base.update(kw)
    return [PilotInfo(pilot_id=i + 1, host=f"h{i}", **base) for i in range(n)]  # type: ignore[arg-type]


def test_each_clause_and_resource_says_what_it_rejects_and_the_nearest_offer() -> None:
    spec = MatchSpec(
        requirements='Memory > 100000 && Site == "T1_NOWHERE" && Cpus >= 1', request_cpus=64
    )
    pilots = [*_pilots(11), PilotInfo(pilot_id=12, site="T2_AB", cpus=4, memory=6000, disk=9)]
    found = analyse(spec, pilots, live=12, now=0.0)
    assert found.matching == 0 and found.examined == 12
    lines = found.lines()
    assert lines[0] == "Memory > 100000: rejects 12 of 12; the largest pilot has 8,000"
    assert lines[1] == (
        'Site == "T1_NOWHERE": rejects 12 of 12; the pilots have Site "T2_XY" (11), "T2_AB" (1)'
    )
    assert lines[2] == "Cpus >= 1: rejects 0 of 12"
    assert "the pilots' Requirements: rejects 0 of 12" in lines
    assert "request_cpus 64: rejects 12 of 12; the largest pilot has 8" in lines
    assert "request_memory 0 MB: rejects 0 of 12" in lines
    assert "max_runtime 1h00m within the pilot's life: rejects 0 of 12" in lines
    assert found.short() == "Memory > 100000: rejects 12 of 12; the largest pilot has 8,000"


def test_the_pilots_requirements_and_their_life_are_conditions_too() -> None:
    picky = _pilots(3, requirements="TARGET.RequestMemory > 5000")
    short_lived = [PilotInfo(pilot_id=9, cpus=1, memory=100, disk=100, expires_at=600.0)]
    found = analyse(MatchSpec(max_runtime=3600), picky + short_lived, live=4, now=0.0)
    lines = found.lines()
    assert "the pilots' Requirements TARGET.RequestMemory > 5000: rejects 3 of 4" in lines
    assert (
        "max_runtime 1h00m within the pilot's life: rejects 1 of 4; "
        "the longest-lived pilot has no end"
    ) in lines
    assert found.matching == 0


def test_expressions_outside_the_compiled_subset_go_to_classad2_and_costly_ones_wait() -> None:
    spec = MatchSpec(requirements='stringListMember(Site, "A,B") && regexp("^T2", Site)')
    found = analyse(spec, _pilots(2, site="A"), live=2, now=0.0)
    lines = found.lines()
    assert lines[0] == 'stringListMember(Site, "A,B"): rejects 0 of 2'
    assert lines[1] == 'regexp("^T2", Site): costly: not evaluated here'
    assert found.matching == 2  # what could be evaluated lets them all through


def test_the_pilots_examined_are_bounded() -> None:
    found = analyse(MatchSpec(), _pilots(MAX_PILOTS + 7), live=MAX_PILOTS + 7, now=0.0)
    assert found.examined == MAX_PILOTS and found.live == MAX_PILOTS + 7
    assert found.short() == f"{MAX_PILOTS} of {MAX_PILOTS} live pilot(s) may run it"
