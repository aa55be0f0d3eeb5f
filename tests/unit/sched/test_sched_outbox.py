"""A worker's unacknowledged completions (``sched.outbox``), driven synchronously."""

from __future__ import annotations

from glidein_ext.sched.outbox import Outbox


def test_completions_stay_until_acknowledged_and_are_resent_when_due() -> None:
    box = Outbox(resend_after=3.0)
    box.add((40, 1), "c40", now=0.0)
    box.add((41, 1), "c41", now=1.0)
    assert (40, 1) in box and len(box) == 2
    assert box.due(2.9) == []
    assert box.due(3.0) == [((40, 1), "c40")]
    box.sent((40, 1), now=3.0)  # resent: due again 3 s later
    assert box.due(3.5) == []
    assert box.everything() == [((40, 1), "c40"), ((41, 1), "c41")]  # for a new master
    box.acked((40, 1))  # a master says the Task Queue has it
    box.acked((99, 1))  # unknown: nothing
    assert box.everything() == [((41, 1), "c41")]
    box.add((41, 1), "c41", now=4.0)  # a resend keeps its place and its clock restarts
    assert box.due(6.9) == [] and len(box) == 1


def test_the_oldest_completion_goes_past_the_limit() -> None:
    box = Outbox(resend_after=1.0, limit=2)
    for task in (1, 2, 3):
        box.add((task, 1), task, now=0.0)
    assert [key for key, _ in box.everything()] == [(2, 1), (3, 1)]
