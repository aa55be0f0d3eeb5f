"""``Matcher.choose_several`` (a pool's take candidates, Lee 2003 §4.2) in one pass gives what
repeated ``choose`` calls give, each removing its pick: the same tasks in the same order, over
random queues (groups with their Requirements and Ranks, priorities, inputs a pilot caches,
tasks held for an idle pilot that holds their data, batched and one-by-one groups)."""

from __future__ import annotations

import random

import pytest

from glidein_ext.tq.models import MatchSpec, PilotInfo, QueuedTask
from glidein_ext.tq.service.matching.matcher import Matcher


def _queue(seed: int) -> tuple[Matcher, list[int]]:
    rng = random.Random(seed)
    matcher = Matcher(wait_for_data=60.0 if seed % 2 else 0.0)
    specs = [
        MatchSpec(
            requirements=rng.choice(["true", f"TARGET.Cpus >= {rng.randint(1, 4)}"]),
            rank=rng.choice(["0", str(rng.randint(0, 3)), "TARGET.Cpus", "TARGET.Memory / 1000"]),
            request_cpus=rng.choice([1, 1, 2, 8]),
        )
        for _ in range(rng.randint(1, 8))
    ]
    files = [f"/store/f{i}" for i in range(12)]
    for task_id in range(1, rng.randint(2, 60)):
        inputs = tuple(rng.sample(files, rng.randint(0, 2)))
        priority = rng.choice([0, 0, 1, 5])
        matcher.add_task(QueuedTask(task_id, rng.choice(specs), inputs, priority, rng.random()))
    pilots = []
    for pilot_id in range(1, 5):
        matcher.add_pilot(
            PilotInfo(
                pilot_id,
                cpus=rng.randint(1, 4),
                memory=rng.choice([1000, 4000]),
                rank=rng.choice(["0", "TARGET.RequestCpus", "-TARGET.RequestCpus"]),
                idle=rng.random() < 0.5,
                cached=set(rng.sample(files, rng.randint(0, 4))),
            )
        )
        pilots.append(pilot_id)
    return matcher, pilots


@pytest.mark.parametrize("seed", range(60))
def test_one_pass_gives_what_repeated_choices_give(seed: int) -> None:
    matcher, pilots = _queue(seed)
    before = matcher.task_ids()
    for pilot_id in pilots:
        for count in (2, 3, 8, 100):
            one_pass = matcher.choose_several(pilot_id, 10.0, count)
            repeated = matcher._choose_one_by_one(pilot_id, 10.0, count)
            assert one_pass == repeated, (pilot_id, count)
    assert matcher.task_ids() == before  # nothing removed
