"""The TaskList and the workers' replies on the wire (Delgado Peris 2014 §III.B): round trips,
strictness, and sizes against the datagram budget."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from glidein_ext.dht import wire
from glidein_ext.dht.protocol import BODY_BUDGET
from glidein_ext.sched.ranking import InputFile, Ranker, TaskEntry, TaskSpec, WorkerAd, WorkerState
from glidein_ext.sched.tasklist import (
    TaskList,
    combine,
    decode_replies,
    decode_tasklist,
    encode_reply,
    encode_tasklist,
    fit_tasks,
    reply_limit,
)

SPEC = TaskSpec("true", "0", 1, 0, 0, 600.0, (("Owner", "cms"),))


def _entries(n: int) -> list[TaskEntry]:
    return [
        TaskEntry(100 + i, SPEC, (InputFile(f"/store/w1/step0/f{i:04d}.dat"),)) for i in range(n)
    ]


def _tasklist(entries: list[TaskEntry]) -> TaskList:
    return TaskList(7, 2, 1, ("10.0.0.1", 4000), ((3, ("10.0.0.3", 4001)),), 16, tuple(entries))


def test_a_tasklist_travels_and_comes_back_equal() -> None:
    tasklist = _tasklist(_entries(5))
    payload = encode_tasklist(tasklist)
    assert len(payload["p"]) == 1  # equal specs travel once
    decoded = decode_tasklist(wire.decode(wire.encode(payload)))
    assert decoded.tasks[0].inputs == tasklist.tasks[0].inputs  # sizes do not travel
    assert decoded == tasklist


@pytest.mark.parametrize(
    "change",
    [{"p": "x"}, {"t": [[1, 5, []]]}, {"t": [[1, 0, [3]]]}, {"a": ["h"]}, {"s": [[1, "h"]]}],
)
def test_a_malformed_tasklist_is_refused(change: dict[str, object]) -> None:
    payload = {**encode_tasklist(_tasklist(_entries(2))), **change}
    with pytest.raises(ValueError):
        decode_tasklist(payload)


def test_replies_are_combined_and_decoded_strictly() -> None:
    ranker = Ranker(WorkerAd())
    entries = [TaskEntry(i, e.spec, e.inputs) for i, e in enumerate(_entries(4))]
    state = WorkerState(cached=frozenset({"/store/w1/step0/f0002.dat"}))
    ranking = ranker.rank(entries, state, limit=2)
    parts = [encode_reply(5, 0, 0, ranking), encode_reply(6, 40, 39, None)]
    merged = combine([combine(parts), [[5, 0, 0, 1, 3, 1000]], "junk", [[9, 0, 0, 1, 99, 1]]])
    replies = decode_replies(wire.decode(wire.encode(merged)), n_tasks=4)
    assert [r.pilot_id for r in replies] == [5, 6]  # the repeat and the bad position dropped
    first, busy = replies
    assert first.idle and first.truncated and first.allowed == 4
    assert max(first.ranks, key=first.ranks.__getitem__) == 2  # the task with its input local
    assert abs(first.ranks[2] - ranking.ranks[2]) < 1e-3
    assert not busy.idle and busy.current == 40 and busy.last_done == 39


def test_fit_cuts_the_tasklist_to_one_datagram() -> None:
    entries = _entries(3000)

    def build(chosen: Sequence[TaskEntry]) -> object:
        return encode_tasklist(_tasklist(list(chosen)))

    payload, fitted = fit_tasks(entries, build, lambda p: len(wire.encode(p)), BODY_BUDGET)
    assert 500 < fitted < 3000
    assert len(wire.encode(payload)) <= BODY_BUDGET
    assert len(wire.encode(build(entries[: fitted + 1]))) > BODY_BUDGET
    small, count = fit_tasks(entries[:10], build, lambda p: len(wire.encode(p)), BODY_BUDGET)
    assert count == 10 and small == build(entries[:10])


@pytest.mark.parametrize("repliers", [1, 200, 1500])
def test_every_idle_workers_reply_fits_the_aggregate(repliers: int) -> None:
    limit = reply_limit(repliers, int(BODY_BUDGET * 0.85))
    assert 1 <= limit <= 64
    worst = [
        [100_000 + p, 0, 99_999, 5000, *[x for i in range(limit) for x in (1999 - i, 17_999)]]
        for p in range(repliers)
    ]
    assert len(wire.encode(worst)) <= BODY_BUDGET - 64


def test_a_busy_worker_reads_all_but_the_tasks() -> None:
    tasklist = _tasklist(_entries(5))
    header = decode_tasklist(encode_tasklist(tasklist), with_tasks=False)
    assert header == dataclasses.replace(tasklist, tasks=())


def test_a_reply_that_breaks_a_field_rule_is_dropped_and_the_others_are_read() -> None:
    good = [8, 0, 3, 2, 0, 500, 1, 250]
    bad = [
        [7, 0, 0, 1, 0],  # a position without its rank
        [7, 0, 0],  # too short
        [7, 0, 0, 1, 0, 1.5],  # a rank that is no integer
        [7, True, 0, 1],  # a bool is no integer
        [7, 0, 0.0, 1],  # a reply without ranks whose head holds a float
        [7, 0, 0, 1, "0", 1],  # a string position
        [7, 0, 0, 2, 0, 1, 0, 2],  # a position twice
        [7, 0, 0, 1, -1, 1],  # before the TaskList
        [7, 0, 0, 1, 2, 1],  # past the TaskList (2 tasks)
        {"pilot": 7},  # no list at all
    ]
    for raw in bad:
        assert decode_replies([raw, good], n_tasks=2)[0].pilot_id == 8, raw
    (reply,) = decode_replies([good], n_tasks=2)
    assert (reply.pilot_id, reply.current, reply.last_done, reply.allowed) == (8, 0, 3, 2)
    assert reply.ranks == {0: 0.5, 1: 0.25}
    (busy,) = decode_replies([[9, 41, 40, 0]], n_tasks=2)
    assert busy.ranks == {} and busy.current == 41 and busy.allowed == 0
    # a reply without ranks reads as one with: allowed never below the ranks sent (none)
    assert decode_replies([[9, 41, 40, -3]], n_tasks=2)[0].allowed == 0
    (subclassed,) = decode_replies([[Number(9), 0, 0, Number(2)]], n_tasks=2)
    assert (subclassed.pilot_id, subclassed.allowed, subclassed.idle) == (9, 2, True)


class Number(int):
    """An int of another type (what a decoder might give): still an integer."""
