"""The simulator's own parts, driven synchronously: the workload's dependencies, the caches' fetch
order and the SE model, the recorder, the cost model."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from glidein_ext.errors import UsageError
from glidein_ext.sim.calibration import REFERENCE, CostModel
from glidein_ext.sim.config import MB, SimConfig, Storage
from glidein_ext.sim.recorder import Recorder
from glidein_ext.sim.storage import Caches
from glidein_ext.sim.workload import Dependencies, build


@pytest.mark.parametrize(
    ("kind", "step0", "step1", "reads"),
    [("w1", 80, 80, 1), ("w2", 40, 80, 1), ("w3", 80, 40, 2)],
)
def test_workflows_are_the_seeds_shapes(kind: str, step0: int, step1: int, reads: int) -> None:
    tasks = build(kind, 1.0)
    first = [t for t in tasks if t.step == 0]
    second = [t for t in tasks if t.step == 1]
    assert (len(first), len(second)) == (step0, step1)
    assert all(len(t.inputs) == reads for t in second)
    readers: dict[str, int] = {}
    for task in second:
        for lfn in task.inputs:
            readers[lfn] = readers.get(lfn, 0) + 1
    # serial chain: each file read once; splitting: twice; merging: each job reads two
    assert set(readers.values()) == ({2} if kind == "w2" else {1})


def test_a_task_is_released_when_its_last_input_exists() -> None:
    tasks = build("w3", 1 / 40)  # 2 step0 tasks, 1 merge reading both
    deps = Dependencies(tasks)
    first, second = deps.initial()
    merge = next(t for t in tasks if t.step == 1)
    assert deps.produced(deps.tasks[first].outputs) == []
    assert deps.waiting == 1
    assert deps.produced(deps.tasks[second].outputs) == [merge.task_id]
    assert deps.produced(deps.tasks[second].outputs) == []  # a file exists only once


def _caches(**changes: object) -> Caches:
    config = SimConfig(pilots_per_host=2, file_size=100 * MB).replace(**changes)
    caches = Caches(config, random.Random(1))
    caches.join(1, 0, "wn0")
    caches.join(2, 0, "wn0")  # same host as 1
    caches.join(3, 0, "wn1")  # same site, another host
    caches.join(4, 1, "wn2")  # another site
    return caches


def test_inputs_come_from_cache_host_peer_then_se() -> None:
    caches = _caches(storage=Storage(0.0, 0.0))
    assert caches.stage_out(1, ("/a",)).ok
    assert caches.stage_in(1, ("/a",), dht=True).origins == {"cache": 1}
    assert caches.stage_in(2, ("/a",), dht=True).origins == {"host": 1}
    assert caches.stage_in(3, ("/a",), dht=True).origins == {"peer": 1}
    assert caches.stage_in(4, ("/a",), dht=True).origins == {"se": 1}  # not a peer of its site
    assert caches.holders("/a") == {1, 2, 3, 4}  # every fetch is cached


def test_without_the_dht_a_peer_is_no_source() -> None:
    caches = _caches()
    caches.stage_out(1, ("/a",))
    assert caches.stage_in(3, ("/a",), dht=False).origins == {"se": 1}


def test_single_pilot_cache_does_not_share_the_host() -> None:
    caches = _caches(scheme="C2")
    caches.stage_out(1, ("/a",))
    assert caches.stage_in(2, ("/a",), dht=False).origins == {"se": 1}
    assert caches.link_host(2) == 0


def test_cache_per_host_links_the_neighbours_files() -> None:
    caches = _caches(scheme="C1")
    caches.stage_out(1, ("/a", "/b"))
    assert caches.link_host(2) == 2
    assert caches.cached(2) == {"/a", "/b"}
    assert caches.link_host(2) == 0


def test_no_cache_reads_everything_from_the_se() -> None:
    caches = _caches(scheme="none")
    caches.stage_out(1, ("/a",))
    assert caches.stage_in(1, ("/a",), dht=True).origins == {"se": 1}
    assert caches.cached(1) == set()


def test_the_se_delays_by_the_delay_factor_and_fails_by_the_failure_rate() -> None:
    slow = _caches(storage=Storage(0.5, 0.0, time_scale=100.0, bandwidth=100 * MB))
    took = [slow.stage_in(1, (f"/x{i}",), dht=False).seconds for i in range(200)]
    assert 45 < sum(took) / len(took) < 57  # 0.5 x 100 s x N(1, 0.25), plus 1 s of transfer
    broken = _caches(storage=Storage(0.0, 1.0))
    assert not broken.stage_in(1, ("/x",), dht=False).ok
    assert not broken.stage_out(1, ("/y",)).ok
    assert broken.cached(1) == set()  # a failed stage-out keeps nothing


def test_lru_evicts_when_the_cache_is_full() -> None:
    caches = _caches(
        scheme="C2", cache_max_space=250 * MB, cache_min_threshold=0, storage=Storage(0.0, 0.0)
    )
    caches.stage_out(1, ("/a", "/b", "/c"))  # room for two
    assert caches.cached(1) == {"/b", "/c"}
    assert caches.holders("/a") == set()


def test_recorder_counts_like_the_task_queue() -> None:
    recorder = Recorder()
    recorder.request("register", 0.0, 0)  # before the workflow: not in its window
    recorder.submit(2, 10.0)
    recorder.request("request", 10.5, 3)
    for pilot, (start, end) in ((1, (11.0, 20.0)), (1, (21.0, 30.0)), (2, (14.0, 22.0))):
        recorder.started(pilot, start)
        recorder.ended(pilot, end, ok=True)
        recorder.accepted(pilot, start, end, {"cache": 1, "se": 1})
    recorder.finish(30.0)
    row = recorder.summary(expected_first=2)
    assert row["requests"] == 1
    assert row["requests_per_task"] == 0.5
    assert row["delay_median"] == 1.0  # pilot 1's gap 20 -> 21
    assert row["cache_hit"] == 0.5
    assert row["turnaround"] == 20.0
    assert row["first_burst"] == 4.0  # the second pilot's first start, 14 - 10
    assert row["queue_max"] == 3
    assert recorder.first_burst(3) is None


def test_cost_model_is_linear_in_the_work_and_round_trips(tmp_path: Path) -> None:
    model = REFERENCE
    assert model.match_time(10, 5, 0) == pytest.approx(
        model.match_base + 10 * model.per_eval + 5 * model.per_group
    )
    assert model.rank_time(1000) == pytest.approx(1000 * model.rank_per_task)
    path = tmp_path / "costs.json"
    path.write_text(model.to_json(), encoding="utf-8")
    assert CostModel.from_file(path) == model


def test_config_refuses_unknown_choices() -> None:
    with pytest.raises(UsageError, match="architecture"):
        SimConfig(architecture="p2p")
    with pytest.raises(UsageError, match="SE condition"):
        Storage.condition("d9f9")
    assert Storage.condition("d3f1").failure_rate == 0.0
    assert Storage.condition("d3f3").delay_factor == 0.5
