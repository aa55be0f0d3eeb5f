"""The master's stock of successors (``sched.stock``): when a round needs no ``sync``."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from glidein_ext.sched import stock as stock_module
from glidein_ext.sched.stock import OfferStock


@dataclass(frozen=True)
class Offer:
    task_id: int


def test_a_success_releases_its_successors_for_the_round_that_carries_it() -> None:
    stock: OfferStock[Offer] = OfferStock()
    stock.placed(1, (Offer(11), Offer(12)))
    stock.placed(2, (Offer(21),))
    assert stock.expected == 2 and stock.current() == [] and not stock.covers(1)
    stock.completed(1, ok=True)
    assert [o.task_id for o in stock.current()] == [11, 12]
    assert stock.covers(2) and not stock.covers(3) and not stock.covers(0)
    stock.completed(1, ok=True)  # a resend: nothing more
    assert len(stock.current()) == 2 and stock.expected == 1
    stock.placed(11)  # taken in this round: out of the stock
    assert [o.task_id for o in stock.current()] == [12]
    stock.round_ended()  # 12 is the Task Queue's to offer (it holds it for its data)
    assert stock.current() == [] and not stock.covers(1)


def test_a_failure_releases_nothing_and_a_forgotten_task_is_not_expected() -> None:
    stock: OfferStock[Offer] = OfferStock()
    stock.placed(1, (Offer(11),))
    stock.placed(2, (Offer(21),))
    stock.completed(1, ok=False)
    assert stock.current() == [] and stock.expected == 1
    stock.forget(2)  # reported by a sync, or its worker died
    stock.completed(2, ok=True)
    assert stock.current() == [] and stock.expected == 0


def test_a_completion_that_may_release_unknown_tasks_makes_the_round_sync() -> None:
    stock: OfferStock[Offer] = OfferStock()
    stock.placed(1, (Offer(11),))
    stock.placed(2, (), more=True)  # feeds a merge that needs other tasks too
    stock.completed(1, ok=True)
    assert stock.covers(1)
    stock.completed(2, ok=True)
    assert not stock.covers(1)  # the merge may be runnable: only a sync tells
    stock.round_ended()
    stock.placed(3, (Offer(31),))
    stock.completed(3, ok=True)
    assert stock.covers(1)


def test_the_stock_remembers_a_bounded_number_of_placed_tasks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stock_module, "REMEMBERED", 3)
    stock: OfferStock[Offer] = OfferStock()
    for task in range(1, 6):
        stock.placed(task, (Offer(task + 10),))
    assert stock.expected == 3
    stock.completed(1, ok=True)  # forgotten: its worker died, or another master reported it
    assert stock.current() == []
    stock.completed(5, ok=True)
    assert [o.task_id for o in stock.current()] == [15]


def test_a_round_needs_no_tasklist_when_each_idle_worker_made_a_successor_s_input() -> None:
    stock: OfferStock[Offer] = OfferStock()
    stock.placed(1, (Offer(11), Offer(12)))  # ran on worker 7
    stock.placed(2, (Offer(21),))  # on worker 8
    stock.placed(3, ())  # on worker 9: feeds nothing
    stock.completed(1, ok=True, pilot=7)
    stock.completed(2, ok=True, pilot=8)
    pairs = stock.direct([8, 7])
    assert pairs is not None
    assert [(o.task_id, p) for o, p in pairs] == [(11, 7), (21, 8)]
    stock.completed(3, ok=True, pilot=9)
    assert stock.direct([7, 8, 9]) is None  # worker 9 holds nothing offered: the round ranks
    assert stock.covers(3)  # three successors for three workers, ranked
    stock.round_ended()
    assert stock.direct([7]) is None


def test_no_direct_round_after_a_completion_that_may_have_released_a_merge() -> None:
    stock: OfferStock[Offer] = OfferStock()
    stock.placed(1, (Offer(11),), more=True)
    stock.completed(1, ok=True, pilot=7)
    assert stock.direct([7]) is None and not stock.covers(1)
