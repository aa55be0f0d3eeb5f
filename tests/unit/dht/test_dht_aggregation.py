"""The table of expected replies at one node of a broadcast (Delgado Peris 2014 §III.B)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from glidein_ext.dht.aggregation import Aggregation, child_budget


def test_complete_when_all_replies_and_own_answer_are_in() -> None:
    agg = Aggregation(sum, own_answer_pending=True)
    agg.expect(1)
    agg.expect(2)
    assert agg.pending == 3
    assert agg.reply(1, 10)
    agg.own_answer(1)
    assert not agg.complete
    assert agg.reply(2, 5)
    assert agg.complete
    assert agg.finish() == 16


def test_late_unexpected_and_duplicate_replies_are_dropped() -> None:
    agg = Aggregation(sum, own_answer_pending=False)
    agg.expect(1)
    agg.expect(2)
    assert not agg.reply(3, 100)  # not our child
    assert agg.reply(1, 1)
    assert not agg.reply(1, 1)  # twice
    assert agg.finish() == 1  # timeout: child 2 never answered
    assert not agg.reply(2, 7)
    agg.own_answer(9)
    assert agg.late == 4
    assert agg.finished


def test_forgotten_children_are_not_awaited() -> None:
    agg = Aggregation(sum, own_answer_pending=False)
    agg.expect(1)
    agg.forget(1)
    assert agg.complete
    assert agg.finish() is None  # nobody answered


def test_none_answers_are_left_out() -> None:
    agg = Aggregation(sorted, own_answer_pending=True)
    agg.expect(1)
    agg.own_answer(None)
    agg.reply(1, 3)
    assert agg.finish() == [3]


def test_without_a_combine_function_the_parts_go_up_uncombined() -> None:
    agg = Aggregation(None, own_answer_pending=False)
    assert not agg.merged
    agg.expect(1)
    agg.expect(2)
    agg.reply(1, 5)
    agg.reply(2, [6, None, 7], merged=False)
    assert agg.finish() == [5, 6, 7]
    parent = Aggregation(sum, own_answer_pending=False)
    parent.expect(3)
    parent.reply(3, [5, 6, 7], merged=False)
    assert parent.merged
    assert parent.finish() == 18


@given(st.floats(min_value=0.001, max_value=1000), st.floats(min_value=0, max_value=10))
def test_child_budget_is_positive_and_shorter(remaining: float, margin: float) -> None:
    budget = child_budget(remaining, margin)
    assert 0 < budget <= remaining
    assert budget >= remaining - margin


def test_a_gap_in_a_subtree_makes_the_answer_partial() -> None:
    agg = Aggregation(sum, own_answer_pending=False)
    agg.expect(1)
    agg.expect(2)
    agg.reply(1, 3, complete=False)  # somebody below child 1 timed out
    agg.reply(2, 4)
    assert agg.complete
    assert not agg.whole
    whole = Aggregation(sum, own_answer_pending=False)
    whole.expect(1)
    whole.reply(1, 3)
    assert whole.whole


def test_a_given_up_child_that_was_only_slow_still_counts() -> None:
    # Child 1 did not acknowledge in time; its region went to child 3, but child 1 was alive and
    # child 3 had heard from it already (so answers child 1): child 1's late reply carries both.
    agg = Aggregation(sum, own_answer_pending=False)
    agg.expect(1)
    agg.expect(2)
    agg.expect(3)
    agg.give_up(1)
    agg.forget(3)
    agg.stale(1)
    assert agg.reply(2, 4)
    assert not agg.complete and not agg.whole  # child 1's region comes with its reply: wait
    assert agg.reply(1, 10)  # taken, not dropped as unexpected
    assert agg.complete and agg.whole and agg.late == 0
    assert not agg.reply(1, 10)  # once
    assert agg.finish() == 14


def test_a_given_up_child_whose_reply_never_comes_leaves_a_gap() -> None:
    agg = Aggregation(sum, own_answer_pending=False)
    agg.expect(1)
    agg.give_up(1)
    agg.stale(1)
    assert not agg.complete
    assert agg.finish() is None  # the timeout closed the table
    assert not agg.whole


def test_a_given_up_child_that_was_dead_leaves_the_answer_whole() -> None:
    # Its region was covered again and every node there answered us: nothing is missing.
    agg = Aggregation(sum, own_answer_pending=False)
    agg.expect(1)
    agg.expect(2)
    agg.give_up(1)
    assert agg.reply(2, 4)
    assert agg.whole
    assert agg.finish() == 4
    assert not agg.reply(1, 10)  # too late once closed
    assert agg.late == 1


def test_giving_up_a_child_that_already_replied_changes_nothing() -> None:
    agg = Aggregation(sum, own_answer_pending=False)
    agg.expect(1)
    assert agg.reply(1, 5)  # its reply beat the timeout of its acknowledgement
    agg.give_up(1)
    agg.stale(1)
    assert agg.whole
    assert agg.finish() == 5
