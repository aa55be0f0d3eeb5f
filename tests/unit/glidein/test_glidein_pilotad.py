"""pilotad: every attribute formula of DESIGN.md, with worked examples."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from glidein_ext.glidein.pilotad import (
    PilotAdInputs,
    RunningJob,
    compute_pilot_ad,
    fraction_1k,
    initial_pilot_ad,
    round_half_up,
)


def job(jid: str, cpus: int, start: int, expected: int, maximum: int) -> RunningJob:
    return RunningJob(jid, cpus, start, expected, maximum)


def test_initial_ad_before_the_daemons_start() -> None:
    ad = initial_pilot_ad(priority_factor=5)
    assert ad["USED_FRACTION1k"] == 0
    assert ad["CAN_POSTPONE_LAST_JOB"] is True
    assert ad["PRIORITY_FACTOR"] == 5
    assert "LAST_JOB_START" not in ad


def test_no_job_yet() -> None:
    ad = compute_pilot_ad(PilotAdInputs(cpus=8, start_time=1000), now=1600)
    assert ad == {
        "USED_FRACTION1k": 0,
        "ADD_UNCOM_TIME1k": 0,
        "ADD_FINAL_EXP_WASTE1k": 0,
        "PRIORITY_FACTOR": 0,
        "CAN_POSTPONE_LAST_JOB": True,
    }


def test_idle_pilot_keeps_its_last_job_start() -> None:
    ad = compute_pilot_ad(PilotAdInputs(cpus=4, start_time=1000, last_job_start=1700), now=2000)
    assert ad["LAST_JOB_START"] == 1700
    assert ad["USED_FRACTION1k"] == 0
    assert ad["ADD_FINAL_EXP_WASTE1k"] == 0
    for absent in ("FIRST_EXP_JOB_END", "LAST_EXP_JOB_END", "LAST_MAX_JOB_END"):
        assert absent not in ad


def test_one_single_core_job_on_a_single_core_pilot() -> None:
    # C=1, P=0, t=100; job s=40, e=160, m=400.
    state = PilotAdInputs(cpus=1, start_time=0, jobs=(job("a", 1, 40, 160, 400),))
    ad = compute_pilot_ad(state, now=100)
    assert ad["USED_FRACTION1k"] == 1024
    assert ad["ADD_UNCOM_TIME1k"] == round_half_up(1024 * 60, 100)  # 614.4 -> 614
    assert ad["ADD_UNCOM_TIME1k"] == 614
    # Drained now: the only CPU stays busy until E, so nothing is wasted.
    assert ad["ADD_FINAL_EXP_WASTE1k"] == 0
    assert (ad["FIRST_EXP_JOB_END"], ad["LAST_EXP_JOB_END"], ad["LAST_MAX_JOB_END"]) == (
        160,
        160,
        400,
    )
    assert ad["LAST_JOB_START"] == 40


def test_several_multicore_jobs_worked_example() -> None:
    # C=4, P=1000, t=2000 (runtime 1000 s).
    # A: 2 CPUs, s=1500, e=2600, m=3000.  B: 1 CPU, s=1800, e=2200, m=5000.
    jobs = (job("A", 2, 1500, 2600, 3000), job("B", 1, 1800, 2200, 5000))
    ad = compute_pilot_ad(
        PilotAdInputs(cpus=4, start_time=1000, jobs=jobs, priority_factor=3), 2000
    )
    assert ad["USED_FRACTION1k"] == 768  # 1024 * 3/4
    assert ad["ADD_UNCOM_TIME1k"] == 307  # 1024 * (2*500 + 1*200) / (4*1000) = 307.2
    # E = 2600: 4*600 idle-or-busy CPU-s minus busy (2*600 + 1*200) = 1000; 1024*1000/4000 = 256.
    assert ad["ADD_FINAL_EXP_WASTE1k"] == 256
    assert ad["FIRST_EXP_JOB_END"] == 2200
    assert ad["LAST_EXP_JOB_END"] == 2600
    assert ad["LAST_MAX_JOB_END"] == 5000
    assert ad["LAST_JOB_START"] == 1800
    assert ad["PRIORITY_FACTOR"] == 3
    assert ad["CAN_POSTPONE_LAST_JOB"] is True


@pytest.mark.parametrize(
    ("cpus", "start", "jobs", "now", "expected"),
    [
        pytest.param(
            # C=2, P=0, t=2000; job e=1500 (past), m=3000.  e is taken as t.
            2,
            0,
            (job("late", 1, 1000, 1500, 3000),),
            2000,
            {
                "FIRST_EXP_JOB_END": 2000,
                "LAST_EXP_JOB_END": 2000,
                "ADD_FINAL_EXP_WASTE1k": 0,
                "LAST_MAX_JOB_END": 3000,
            },
            id="expected end already in the past means any moment",
        ),
        pytest.param(
            2,
            0,
            (job("x", 1, 10, 5000, 1900),),
            2000,
            {"LAST_MAX_JOB_END": 2000, "LAST_EXP_JOB_END": 2000},
            id="max end in the past is clamped and bounds expected end",
        ),
        pytest.param(
            # C=4, P=0, t=1000.  A: 1 CPU, e=900 (past -> 1000).  B: 2 CPUs, e=1500.
            # waste = 4*500 - (1*0 + 2*500) = 1000; 1024 * 1000 / 4000 = 256
            4,
            0,
            (job("A", 1, 100, 900, 4000), job("B", 2, 500, 1500, 4000)),
            1000,
            {"ADD_FINAL_EXP_WASTE1k": 256, "FIRST_EXP_JOB_END": 1000},
            id="one late job and one running job",
        ),
        pytest.param(
            # A job that started before the pilot (clock skew) would give more than 100%.
            1,
            1000,
            (job("a", 1, 0, 5000, 9000),),
            1000,
            {"ADD_UNCOM_TIME1k": 1024, "ADD_FINAL_EXP_WASTE1k": 0},
            id="fractions are capped at 1024 and start-up has no division by zero",
        ),
    ],
)
def test_worked_cases(
    cpus: int, start: int, jobs: tuple[RunningJob, ...], now: int, expected: dict[str, int]
) -> None:
    ad = compute_pilot_ad(PilotAdInputs(cpus=cpus, start_time=start, jobs=jobs), now=now)
    assert {key: ad[key] for key in expected} == expected


def test_draining_clears_can_postpone() -> None:
    ad = compute_pilot_ad(PilotAdInputs(cpus=1, start_time=0, draining=True), now=10)
    assert ad["CAN_POSTPONE_LAST_JOB"] is False


def test_round_half_up() -> None:
    assert round_half_up(1, 2) == 1
    assert round_half_up(3, 2) == 2
    assert round_half_up(5, 4) == 1
    assert fraction_1k(1, 2048) == 1  # exactly 0.5 rounds up
    assert fraction_1k(0, 7) == 0


def test_pilot_needs_a_cpu() -> None:
    with pytest.raises(ValueError):
        PilotAdInputs(cpus=0, start_time=0)


@st.composite
def states(draw: st.DrawFn) -> tuple[PilotAdInputs, int]:
    cpus = draw(st.integers(1, 64))
    start = draw(st.integers(0, 10**6))
    now = draw(st.integers(start, start + 10**6))
    jobs = []
    free = cpus
    for i in range(draw(st.integers(0, 6))):
        if free == 0:
            break
        c = draw(st.integers(1, free))
        free -= c
        s = draw(st.integers(start, now))
        e = draw(st.integers(s, s + 10**6))
        m = draw(st.integers(s, s + 2 * 10**6))
        jobs.append(job(str(i), c, s, e, m))
    return PilotAdInputs(cpus=cpus, start_time=start, jobs=tuple(jobs)), now


@given(states())
def test_property_attributes_are_consistent(case: tuple[PilotAdInputs, int]) -> None:
    state, now = case
    ad = compute_pilot_ad(state, now)
    for key in ("USED_FRACTION1k", "ADD_UNCOM_TIME1k", "ADD_FINAL_EXP_WASTE1k"):
        value = ad[key]
        assert isinstance(value, int)
        assert 0 <= value <= 1024
    if state.jobs:
        first, last, maximum = (
            ad["FIRST_EXP_JOB_END"],
            ad["LAST_EXP_JOB_END"],
            ad["LAST_MAX_JOB_END"],
        )
        assert isinstance(first, int) and isinstance(last, int) and isinstance(maximum, int)
        assert now <= first <= last <= maximum
        assert ad["LAST_JOB_START"] == max(j.start for j in state.jobs)
    else:
        assert ad["USED_FRACTION1k"] == 0
