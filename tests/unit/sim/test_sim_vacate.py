"""Sfiligoi 2013 in the simulator: the pilots' .pilot.ad from the real core, the real victim choice,
victims finishing their task and leaving, and the informed policy freeing CPUs sooner."""

from __future__ import annotations

import pytest

from glidein_ext.errors import UsageError
from glidein_ext.glidein import pilotad
from glidein_ext.sim.calibration import REFERENCE
from glidein_ext.sim.config import SimConfig, Storage
from glidein_ext.sim.engine import simulate
from glidein_ext.sim.vacate import EPOCH, Vacate


def _site() -> Vacate:
    vacate = Vacate(expected_runtime=100.0)
    for pilot_id in (1, 2, 3):
        vacate.joined(pilot_id, f"wn{pilot_id}", 0.0)
    vacate.job_started(1, 11, 10.0, 3600)  # expected end 110
    vacate.job_started(2, 12, 50.0, 3600)  # expected end 150
    return vacate  # pilot 3 idle


def test_the_pilot_ad_comes_from_the_real_core() -> None:
    vacate = _site()
    ad = vacate.pilot_ad(2, 60.0)
    assert ad[pilotad.LAST_EXP_JOB_END] == EPOCH + 150
    assert ad[pilotad.USED_FRACTION1K] == 1024
    assert ad[pilotad.CAN_POSTPONE_LAST_JOB] is True
    assert vacate.pilot_ad(3, 60.0)[pilotad.USED_FRACTION1K] == 0


def test_completion_takes_the_idle_pilot_then_the_earliest_end() -> None:
    vacate = _site()
    selection = vacate.request(60.0, 2, "completion")
    assert selection.satisfied
    assert vacate.victims == {3, 1}
    assert vacate.leaving(1) and not vacate.leaving(2)


def test_waste_of_one_cpu_pilots_falls_to_slot_order() -> None:
    vacate = _site()
    vacate.request(60.0, 2, "waste")
    assert vacate.victims == {1, 2}  # every waste key is 0: slot order


def test_drain_times_count_from_the_request() -> None:
    vacate = _site()
    vacate.request(60.0, 2, "completion")
    vacate.left(3, 61.0)
    assert vacate.summary()["drain_max"] is None  # pilot 1 still runs
    vacate.left(1, 112.0)
    summary = vacate.summary()
    assert summary["drain_max"] == pytest.approx(52.0)
    assert summary["drain_mean"] == pytest.approx(26.5)
    assert summary["drained"] == 2


def _run(policy: str) -> dict[str, object]:
    config = SimConfig(
        pilots=30,
        tasks=300,
        runtime_sd=60.0,
        storage=Storage(0.0, 0.0),
        vacate_at=500.0,
        vacate_cpus=8,
        victim_policy=policy,
        seed=3,
    )
    return simulate(config, REFERENCE).summary


def test_a_vacated_run_still_finishes_and_the_informed_policy_frees_cpus_sooner() -> None:
    informed, blind = _run("completion"), _run("waste")
    for summary in (informed, blind):
        assert summary["tasks_done"] == summary["tasks"]
        assert summary["drained"] == 8
    assert isinstance(informed["drain_mean"], float) and isinstance(blind["drain_mean"], float)
    assert informed["drain_mean"] < blind["drain_mean"]


def test_a_vacate_needs_running_pulling_pilots() -> None:
    with pytest.raises(UsageError, match="pulling pilots"):
        SimConfig(architecture="distributed", vacate_cpus=4, vacate_at=10.0)
    with pytest.raises(UsageError, match="victim policy"):
        SimConfig(victim_policy="random")


def test_cache_spares_the_pilot_whose_cache_queued_tasks_need_and_counts_rereads() -> None:
    vacate = _site()
    vacate.needs = lambda: {1: 700, 2: 0, 3: 0}  # the Task Queue's view at the request
    files = {1: {"/a"}, 2: {"/b"}, 3: set()}
    reads = {"/a": 0, "/b": 1}
    vacate.files_of = lambda pilot_id: files[pilot_id]
    vacate.se_reads_of = lambda lfn: reads[lfn]
    vacate.request(60.0, 2, "cache")
    assert vacate.pilot_ad(1, 60.0)[pilotad.CACHED_INPUT_NEEDED_MB] == 700
    assert vacate.victims == {3, 2}  # completion would take 1 (ends at 110) instead of 2
    vacate.left(3, 61.0)
    vacate.left(2, 151.0)
    reads["/b"] = 3  # two stage-ins read the victim's file from the SE after it left
    summary = vacate.summary()
    assert summary["se_rereads"] == 2 and summary["victims_needed_mb"] == 0
    informed = _site()
    informed.needs = lambda: {1: 700, 2: 0, 3: 0}
    informed.request(60.0, 2, "completion")
    assert informed.victims == {3, 1} and informed.summary()["victims_needed_mb"] == 700
