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
