"""The aggregate model of the Task Queue at the CMS global pool's size (``sim.gridscale``): the
queue's formulas with worked examples, each architecture's load, and the instances needed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from glidein_ext.errors import UsageError
from glidein_ext.sim.calibration import REFERENCE
from glidein_ext.sim.config import SimConfig
from glidein_ext.sim.engine import submit_time
from glidein_ext.sim.experiments.base import run_jobs
from glidein_ext.sim.experiments.gridscale import (
    AGREEMENT,
    COMPARED,
    gridscale_jobs,
    validation_notes,
    validation_rows,
)
from glidein_ext.sim.gridscale import (
    POSTGRES_MEASURED,
    Scale,
    _burst_rounds,
    backoff,
    batch,
    capacity,
    erlang_c,
    estimate,
    expected_max,
    instances_needed,
    mean_wait,
    poll_burst,
    rounds_per_s,
    turnaround,
    waves,
)

POOL = Scale()  # 100 sites, 150,000 pilots, 1,000,000 tasks, 0.71 ms a call


def test_erlang_c_worked_examples() -> None:
    assert erlang_c(1, 0.5) == pytest.approx(0.5)  # one server: the utilization
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)  # two servers at half load
    assert erlang_c(3, 3.0) == 1.0 and erlang_c(4, 0.0) == 0.0
    # M/M/1 at 100 calls/s of 5 ms: W = rho s / (1 - rho) = 0.5 * 0.005 / 0.5
    assert mean_wait(1, 100.0, 0.005) == pytest.approx(0.005)
    assert math.isinf(mean_wait(2, 400.0, 0.005))


def test_capacity_is_linear_in_instances() -> None:
    # one instance's measured rate, times the instances: the measured pool within 16 %
    one = 1 / POSTGRES_MEASURED[1]
    for instances, measured in POSTGRES_MEASURED.items():
        assert capacity(instances, one) == pytest.approx(measured, rel=0.16)
    assert capacity(3, one) == pytest.approx(3 * 1416)


def test_batch_waits_for_a_quiet_window_at_most_five() -> None:
    assert batch(0.0, 0.2) == 0.2
    assert batch(1.0, 0.2) == pytest.approx(0.2214, abs=1e-4)  # rarely more than the window
    assert batch(5.0, 0.2) == pytest.approx(math.expm1(1.0) / 5.0)
    assert batch(100.0, 0.2) == pytest.approx(1.0)
    assert batch(100.0, 0.2, full=40) == pytest.approx(0.39)  # 40 freed: the batch is full
    assert batch(5.0, 0.2, full=40) == pytest.approx(math.expm1(1.0) / 5.0)  # a quiet window first


def test_rounds_carry_one_completion_when_they_trickle_and_a_batch_when_they_pour() -> None:
    slow, fast = rounds_per_s(np.array([0.01, 100.0]), 0.2, 0)
    assert slow == pytest.approx(0.01, rel=0.01)  # each completion its own round
    assert fast == pytest.approx(100.0 / (1 + 100.0 * 1.0))  # a round every five windows


def test_expected_maximum_of_normals() -> None:
    assert expected_max(1) == 0.0
    assert expected_max(2) == pytest.approx(1 / math.sqrt(math.pi), rel=0.05)  # Blom: within 5 %
    assert expected_max(100) == pytest.approx(2.5076, rel=0.01)  # the tables: 2.5076


def test_waves_and_turnaround_of_the_chains() -> None:
    assert waves(300, 200) == [200, 100] and waves(400, 200) == [200, 200]
    small = Scale(pilots=200, sites=2, tasks=600, runtime=100.0, runtime_sd=0.0)
    # two waves of chains, four tasks in a row, three delays between them, the first burst
    assert turnaround(small, 200, 0.5, 3.0) == pytest.approx(3.0 + 4 * 100.0 + 3 * 0.5)


def test_the_back_off_before_its_ceiling() -> None:
    polls, seconds = backoff(Scale(), 0.05)
    assert polls == 6  # 1, 1.5, 2.25, 3.375, 5.06, 7.59 s, then 10 s
    assert seconds == pytest.approx(sum(1.5**n for n in range(6)) + 6 * 0.05)


def test_the_submission_comes_when_the_simulator_submits() -> None:
    for pilots in (200, 1500, 150_000):
        config = SimConfig(pilots=pilots, sites=2)
        assert Scale.from_config(config).submitted_at == submit_time(config)


def test_poll_burst_is_the_back_off_residual_when_the_server_is_free() -> None:
    # 64 pilots start over 2 s, register and poll 1, 1.5, 2.25, 3.375, 5.06 s apart (plus
    # 50 ms round trips); the submission at 10.64 s finds the last of them waiting for its
    # sixth poll, due 13.19 s + 5 x 0.05 s (+ 0.05 s registration) after it started.
    scale = Scale(pilots=64, sites=1, tasks=200)
    burst = poll_burst(scale, 64, 1e-6)
    last_start = 2.0 * 63.5 / 64
    sixth = last_start + 0.05 + sum(1.5**n for n in range(5)) + 5 * 0.05
    assert burst == pytest.approx(sixth + 0.05 - scale.submitted_at, abs=1e-3)
    # a server that takes 10 ms a call answers the 64 requests one after the other
    assert poll_burst(scale, 64, 0.01) > burst


def test_whole_run_calls_of_a_pulling_pilot() -> None:
    small = Scale(pilots=200, sites=2, tasks=600, call_cost=0.003, per_row=1e-4)
    found = estimate(small, "pre-dht", 1)
    call = 2 * small.latency + small.call_cost
    beats = 200 * found.turnaround / (30 + call)
    assert found.requests_per_task * 600 > 3 * 600 + beats  # plus the idle pilots' polls
    central = estimate(small, "centralized", 1)
    assert central.requests_per_task == pytest.approx(found.requests_per_task - 1, abs=0.05)


def test_first_burst_rounds_of_a_distributed_site() -> None:
    # 749 workers a site: a TaskList of 2,000 offers; its first quarter placed, then the site's
    # share of the rest (1,250 - 500), a quarter of it, then what is left (the simulator: 500,
    # 188, 61 pairs)
    rounds = _burst_rounds(Scale.from_config(SimConfig(pilots=1500, sites=2, tasks=5000)))
    assert [round(placed) for _, _, placed, _ in rounds] == [500, 188, 61]
    assert [synced for *_, synced in rounds] == [True, False, False]
    # 99 workers: their 64 ranks reach past the second TaskList's first window
    rounds = _burst_rounds(Scale.from_config(SimConfig(pilots=200, sites=2, tasks=600)))
    assert [round(placed) for _, _, placed, _ in rounds] == [75, 24]


def test_pool_loads_at_the_cms_size() -> None:
    found = estimate(POOL, "pre-dht", 64)
    tasks_per_s = 150_000 / (198 + found.delay_median)
    assert found.calls_per_s == pytest.approx(3 * tasks_per_s + 150_000 / 30)
    # heartbeats alone (5,000 a second) fill one instance: no first burst
    assert math.isinf(estimate(POOL, "pre-dht", 1).first_burst)
    distributed = estimate(POOL, "distributed", 2)
    assert distributed.requests_per_task < 0.5 and distributed.delay_median < 1


def test_instances_needed_at_the_pool_size() -> None:
    needs = {
        (arch, cost): instances_needed(POOL.with_cost(cost), arch)
        for arch in ("pre-dht", "centralized", "distributed")
        for cost in (0.0044, 0.001)
    }
    for found in needs.values():
        assert found is not None and found.meets
        assert found.first_burst < 60 and found.delay_median < 1
        # the fewest: one instance less misses a target
        if found.instances > 1:
            scale = POOL.with_cost(found.call_cost)
            assert not estimate(scale, found.architecture, found.instances - 1).meets
    counts = {key: found.instances for key, found in needs.items() if found is not None}
    assert counts["distributed", 0.0044] < counts["centralized", 0.0044]
    assert counts["pre-dht", 0.001] < counts["pre-dht", 0.0044]


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(UsageError, match="two pilots a site"):
        Scale(pilots=100, sites=100)
    with pytest.raises(UsageError, match="per-call cost"):
        Scale(call_cost=0)
    with pytest.raises(UsageError, match="architecture"):
        estimate(POOL, "central", 1)
    with pytest.raises(UsageError, match="instance"):
        estimate(POOL, "pre-dht", 0)


def test_the_model_agrees_with_the_simulator_at_a_small_size() -> None:
    # The experiment's quick runs (200 pilots, two sites, 600 W1 tasks, 3 ms a call): every
    # metric of every architecture within 20 % of the simulator's.
    results = run_jobs(gridscale_jobs(True, 0), REFERENCE)
    checks = validation_rows(results, REFERENCE)
    assert len(checks) == 3 * len(COMPARED)
    for check in checks:
        assert check["within_20pct"] == "met", check
        assert check["ratio"] == pytest.approx(1.0, abs=AGREEMENT)
    notes = validation_notes(checks)
    assert len(notes) == 3 and all("missed" not in line for line in notes)
