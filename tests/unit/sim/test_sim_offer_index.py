"""The simulated Task Queue's index of the queued tasks no site holds an input of
(``sim.offer_index``): the same offers as ``sched.offers.choose_offers`` reading every task."""

from __future__ import annotations

from collections.abc import Hashable

from hypothesis import given, settings
from hypothesis import strategies as st

from glidein_ext.sched.offers import SHARE_BLOCK, Made, Member, Runnable, by_site, choose_offers
from glidein_ext.sim.offer_index import UnheldTasks

FILES = tuple(f"f{i}" for i in range(8))
GROUP = UnheldTasks.group


def _matches(pilot_id: int, group: Hashable) -> bool:
    return pilot_id % 7 != 0  # pilots 7 and 14 match nothing: a site of them may run nothing


def test_the_index_answers_by_share_and_age() -> None:
    index = UnheldTasks()
    for task_id in (5, 3 * SHARE_BLOCK + 1, 1, SHARE_BLOCK, 2 * SHARE_BLOCK + 4):
        index.add(task_id)
    assert len(index) == 5 and SHARE_BLOCK in index and 2 not in index
    # two sites: even blocks are share 0, odd ones share 1
    assert index.own(0, 2, 10) == [1, 5, 2 * SHARE_BLOCK + 4]
    assert index.own(1, 2, 1) == [SHARE_BLOCK]
    assert index.others(0, 2, 1) == [3 * SHARE_BLOCK + 1]  # the newest, oldest first
    assert index.others(0, 1, 5) == []  # one site: all its share
    # three sites: indexed again
    assert index.own(0, 3, 10) == [1, 5, 3 * SHARE_BLOCK + 1]
    assert index.remove(5) and not index.remove(5)
    assert index.own(0, 3, 10) == [1, 3 * SHARE_BLOCK + 1] and len(index) == 4
    index.add(3 * SHARE_BLOCK)
    assert index.own(0, 3, 10) == [1, 3 * SHARE_BLOCK, 3 * SHARE_BLOCK + 1]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_offers_with_the_index_are_the_offers_of_the_whole_queue(data: st.DataObject) -> None:
    """Whatever the sites, their idle pilots, where the inputs were made, the queue's changes and
    the sites asking in turn (the index keeps its shares between calls): the same offers."""
    index = UnheldTasks()
    queue: dict[int, Runnable] = {}
    made = {
        lfn: Made(data.draw(st.sampled_from("ABCD")), data.draw(st.integers(1, 16)), size)
        for lfn in FILES[:4]
        if (size := data.draw(st.integers(0, 3)))
    }  # f4-f7 are never made: on the SE only
    for _ in range(data.draw(st.integers(1, 4))):
        for task_id in data.draw(st.lists(st.integers(0, 8 * SHARE_BLOCK), max_size=60)):
            if task_id in queue:  # taken
                task = queue.pop(task_id)
                assert index.remove(task_id) == (not any(lfn in made for lfn in task.inputs))
                continue
            inputs = tuple(data.draw(st.lists(st.sampled_from(FILES), max_size=3, unique=True)))
            held = any(lfn in made for lfn in inputs)
            priority = data.draw(st.integers(0, 1)) if held else 0
            since = data.draw(st.sampled_from((0.0, 100.0)))
            queue[task_id] = Runnable(task_id, GROUP, inputs, priority, since)
            if not held:
                index.add(task_id)
        members = tuple(
            Member(pilot_id, data.draw(st.sampled_from("ABCD")), data.draw(st.booleans()))
            for pilot_id in range(1, data.draw(st.integers(1, 16)) + 1)
        )
        site, want = data.draw(st.sampled_from("ABCD")), data.draw(st.integers(0, 40))
        now = data.draw(st.sampled_from((0.0, 200.0)))
        everything = [queue[task_id] for task_id in sorted(queue)]
        with_index = [task for task in everything if any(lfn in made for lfn in task.inputs)]
        pilots = by_site(members)
        expected = choose_offers(site, want, everything, made, pilots, _matches, now, 60.0)
        got = choose_offers(site, want, with_index, made, pilots, _matches, now, 60.0, index)
        assert got == expected
        assert len(index) == len(everything) - len(with_index)
