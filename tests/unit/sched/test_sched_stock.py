"""The master's stock of successors (``sched.stock``): the rounds that need neither a ``sync``
nor a TaskList."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from glidein_ext.sched import stock as stock_module
from glidein_ext.sched.stock import OfferStock


@dataclass(frozen=True)
class Offer:
    task_id: int


def _pairs(stock: OfferStock[Offer], idle: list[int]) -> list[tuple[int, int]] | None:
    found = stock.direct(idle)
    return None if found is None else [(offer.task_id, pilot) for offer, pilot in found]


def test_each_idle_worker_gets_a_successor_of_its_own_task() -> None:
    stock: OfferStock[Offer] = OfferStock()
    stock.placed(1, (Offer(11), Offer(12)))  # ran on worker 7
    stock.placed(2, (Offer(21),))  # on worker 8
    stock.placed(3, ())  # on worker 9: feeds nothing
    assert stock.expected == 3 and _pairs(stock, [7]) is None  # nothing completed yet
    stock.completed(1, ok=True, pilot=7)
    stock.completed(2, ok=True, pilot=8)
    assert _pairs(stock, [8, 7]) == [(11, 7), (21, 8)]
    assert _pairs(stock, [7]) == [(11, 7)]  # 12 waits for the Task Queue's offers
    stock.completed(3, ok=True, pilot=9)
    # Worker 9 holds nothing released: the round syncs and ranks (it does not take worker 7's
    # second successor, which the Task Queue holds for its input's maker).
    assert _pairs(stock, [7, 8, 9]) is None
    stock.placed(21)  # the round placed 21 (ranked), not 11 or 12: they are held for worker 7
    stock.round_ended(0.0)
    assert stock.held == 2
    assert _pairs(stock, [7]) == [(11, 7)] and _pairs(stock, [7]) == [(12, 7)]
    assert _pairs(stock, [7]) is None and _pairs(stock, []) is None


def test_a_resend_a_failure_or_a_forgotten_task_releases_nothing() -> None:
    stock: OfferStock[Offer] = OfferStock()
    stock.placed(1, (Offer(11),))
    stock.placed(2, (Offer(21),))
    stock.placed(3, (Offer(31),))
    stock.completed(1, ok=False, pilot=7)  # retried: queued again, the Task Queue offers it
    assert _pairs(stock, [7]) is None and stock.expected == 2
    assert stock.stale  # the next round syncs: the retry is runnable, the site not dry
    stock.round_ended(0.0)
    stock.forget(2)  # reported by a sync, or its worker died
    stock.completed(2, ok=True, pilot=8)
    assert _pairs(stock, [8]) is None and stock.expected == 1
    stock.completed(3, ok=True, pilot=9)
    stock.completed(3, ok=True, pilot=9)  # a resend: nothing more
    assert _pairs(stock, [9]) == [(31, 9)] and stock.expected == 0
    stock.placed(31)  # taken: out of the stock
    assert _pairs(stock, [9]) is None


def test_a_completion_that_may_have_released_a_merge_makes_the_round_sync() -> None:
    stock: OfferStock[Offer] = OfferStock()
    stock.placed(1, (Offer(11),))
    stock.placed(2, (), more=True)  # feeds a merge that needs other tasks too
    stock.completed(1, ok=True, pilot=7)
    assert _pairs(stock, [7]) == [(11, 7)]
    stock.completed(2, ok=True, pilot=8)
    assert _pairs(stock, [7]) is None  # the merge may be runnable: only a sync tells
    stock.round_ended(0.0)
    stock.placed(3, (Offer(31),))
    stock.completed(3, ok=True, pilot=9)
    assert _pairs(stock, [9]) == [(31, 9)]


def test_a_merge_is_released_by_the_last_of_its_inputs_tasks_to_succeed_here() -> None:
    stock: OfferStock[Offer] = OfferStock()
    stock.placed(1, (Offer(30),), needs=[(2,)])  # merge 30 reads the outputs of 1 and 2
    stock.placed(2, (Offer(30),), needs=[(1,)])
    stock.completed(1, ok=True, pilot=7)
    assert _pairs(stock, [7]) is None  # 2 still runs here: nothing released, and no sync due
    assert not stock.stale
    stock.round_ended(0.0)
    stock.completed(2, ok=True, pilot=8)
    assert _pairs(stock, [8]) == [(30, 8)]  # the last input's maker gets it, no sync


def test_a_merge_whose_other_input_is_not_made_here_makes_the_round_sync() -> None:
    stock: OfferStock[Offer] = OfferStock()
    stock.placed(1, (Offer(30),), needs=[(2,)])  # task 2 runs at another site, or is queued
    stock.completed(1, ok=True, pilot=7)
    assert _pairs(stock, [7]) is None and stock.stale  # only a sync tells if 30 is runnable
    stock.round_ended(0.0)
    # A failed input, or one forgotten (its worker died), never releases the merge here.
    stock.placed(3, (Offer(40),), needs=[(4,)])
    stock.placed(4, (Offer(40),), needs=[(3,)])
    stock.completed(3, ok=False, pilot=7)
    stock.completed(4, ok=True, pilot=8)
    assert _pairs(stock, [8]) is None
    stock.round_ended(0.0)
    stock.placed(5, (Offer(50),), needs=[(6,)])
    stock.placed(6, (Offer(50),), needs=[(5,)])
    stock.forget(6)
    stock.completed(5, ok=True, pilot=7)
    assert _pairs(stock, [7]) is None and stock.stale


def test_the_stock_remembers_a_bounded_number_of_placed_tasks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stock_module, "REMEMBERED", 3)
    stock: OfferStock[Offer] = OfferStock()
    for task in range(1, 6):
        stock.placed(task, (Offer(task + 10),))
    assert stock.expected == 3
    stock.completed(1, ok=True, pilot=7)  # forgotten: its worker died, or another master has it
    assert _pairs(stock, [7]) is None
    stock.completed(5, ok=True, pilot=7)
    assert _pairs(stock, [7]) == [(15, 7)]


def test_quiet_tasks_are_those_placed_here_that_feed_nothing() -> None:
    stock: OfferStock[Offer] = OfferStock()
    stock.placed(1, (Offer(11),))
    stock.placed(2, ())
    stock.placed(3, (), more=True)  # a merge's input: only the Task Queue knows
    assert [stock.quiet(t) for t in (1, 2, 3, 4)] == [False, True, False, False]


def test_a_dry_site_places_the_successors_and_leaves_the_other_workers_idle() -> None:
    """Nothing runnable at the Task Queue: a worker without a successor of its own has nothing to
    be offered, so the round needs no sync when each released successor goes to its maker."""
    stock: OfferStock[Offer] = OfferStock()
    stock.placed(1, (Offer(11),))
    stock.placed(2, ())
    stock.completed(1, ok=True, pilot=7)
    stock.completed(2, ok=True, pilot=9)
    assert _pairs(stock, [7, 9]) is None  # not known to be dry: worker 9 may get an offer
    found = stock.direct([7, 9], dry=True)
    assert found is not None and [(o.task_id, p) for o, p in found] == [(11, 7)]
    stock.placed(11)
    # A successor left over (a second one of worker 7's task) is the Task Queue's to offer to
    # worker 9: the round syncs.
    stock.round_ended(0.0)
    stock.placed(5, (Offer(51), Offer(52)))
    stock.completed(5, ok=True, pilot=7)
    assert stock.direct([7, 9], dry=True) is None
    assert stock.direct([9], dry=True) is None  # no idle worker with a successor of its own


def test_a_round_ended_says_how_many_released_successors_it_left_to_the_task_queue() -> None:
    stock: OfferStock[Offer] = OfferStock()
    stock.placed(5, (Offer(51), Offer(52)))  # a split: two readers of its output
    stock.completed(5, ok=True, pilot=7)
    found = stock.direct([7])
    assert found is not None and [o.task_id for o, _ in found] == [51]
    stock.placed(51, ())  # the Task Queue accepted the pair
    assert stock.round_ended(0.0) == 1  # 52 is queued at the Task Queue: the site is not dry
    assert stock.round_ended(1.0) == 0


def test_a_splits_second_reader_waits_for_its_maker_and_goes_to_it_without_a_sync() -> None:
    stock: OfferStock[Offer] = OfferStock(hold=100.0)
    stock.placed(5, (Offer(51), Offer(52)))  # a split: two readers of its output
    stock.completed(5, ok=True, pilot=7)
    stock.placed(51)  # to worker 7, which made the input
    stock.round_ended(10.0)
    assert stock.held == 1  # 52 waits for worker 7 here (and at the Task Queue)
    stock.placed(51, (Offer(61),))
    assert _pairs(stock, [8]) is None  # another idle worker: the round syncs and ranks
    stock.round_ended(20.0)
    stock.completed(51, ok=True, pilot=7)
    # Worker 7 is idle again: the oldest it made the input of first, 61 later.
    assert _pairs(stock, [7]) == [(52, 7)]
    stock.placed(52)
    stock.round_ended(30.0)
    assert _pairs(stock, [7]) == [(61, 7)]


def test_a_completion_is_not_quiet_while_a_successor_is_held_for_its_worker() -> None:
    # A quiet completion at a dry site waits for the next call; worker 7's must start the round
    # that gives it the second reader held for it.
    stock: OfferStock[Offer] = OfferStock()
    stock.placed(5, (Offer(51), Offer(52)))
    stock.completed(5, ok=True, pilot=7)
    stock.placed(51)  # to worker 7; 52 is held for it
    stock.round_ended(0.0)
    assert stock.quiet(51) and stock.quiet(51, pilot=8)
    assert not stock.quiet(51, pilot=7)


def test_a_held_successor_placed_by_a_ranked_round_or_held_too_long_leaves_the_stock() -> None:
    stock: OfferStock[Offer] = OfferStock(hold=100.0)
    stock.placed(5, (Offer(51), Offer(52), Offer(53)))
    stock.completed(5, ok=True, pilot=7)
    stock.round_ended(0.0)  # none placed: all three held
    stock.placed(51)  # a sync offered it and the ranks gave it to another worker
    assert stock.held == 2
    stock.round_ended(100.0)
    assert stock.held == 2
    stock.round_ended(100.5)  # past ``hold``: the Task Queue's offers decide
    assert stock.held == 0 and _pairs(stock, [7]) is None


def _ids(found: list[Offer] | None) -> list[int] | None:
    return None if found is None else [offer.task_id for offer in found]


def test_a_round_ranks_the_last_syncs_offers_that_no_round_placed() -> None:
    stock: OfferStock[Offer] = OfferStock(spare=10.0)
    assert stock.spares([7], 0.0) is None  # no sync yet
    stock.offered([Offer(1), Offer(2), Offer(3), Offer(4)], 100.0)
    stock.placed(1)  # the sync's round placed one
    stock.round_ended(100.0)
    assert _ids(stock.spares([7], 101.0)) == [2, 3, 4]
    assert _ids(stock.spares([7, 8, 9], 101.0)) == [2, 3, 4]
    assert stock.spares([6, 7, 8, 9], 101.0) is None  # fewer spares than workers: a sync
    assert stock.spares([7], 110.5) is None  # too old: a sync
    stock.refused([3])  # another site took 3
    assert _ids(stock.spares([7], 101.0)) == [2, 4]
    stock.refused()  # the workers took none of them
    assert stock.spares([7], 101.0) is None


def test_idle_makers_get_their_successors_and_the_others_rank_the_rest() -> None:
    stock: OfferStock[Offer] = OfferStock()
    stock.offered([Offer(1), Offer(2), Offer(11), Offer(12)], 0.0)
    stock.placed(5, (Offer(11), Offer(12)))  # on worker 7: a split's two readers
    stock.placed(6, (Offer(21),), more=True)  # on worker 8: it feeds more
    stock.completed(5, ok=True, pilot=7)
    assert [(o.task_id, p) for o, p in stock.mine([7, 9])] == [(11, 7)]
    # worker 9 has no successor of its own: it ranks the spares, not 7's second reader
    assert _ids(stock.spares([7, 9], 1.0)) == [1, 2]
    assert _ids(stock.others([Offer(2), Offer(12), Offer(40)], [7, 9])) == [2, 40]
    stock.completed(6, ok=True, pilot=8)  # may have released tasks only a sync shows
    assert stock.spares([7, 9], 1.0) is None
    stock.placed(11)
    stock.round_ended(1.0)  # 12 is held for worker 7, busy now
    assert stock.mine([9]) == [] and _ids(stock.spares([9], 2.0)) == [1, 2, 12]
    # held for a busy maker, it is the Task Queue's to offer (after the older tasks)
    assert _ids(stock.others([Offer(2), Offer(12)], [9])) == [2, 12]
    assert _ids(stock.others([Offer(2), Offer(12)], [7, 9])) == [2]  # 7 idle again: its own
    stock.refused([12])  # another site took it: neither kept for 7 nor spare
    assert stock.mine([7]) == [] and [o.task_id for o, _ in stock.mine([8])] == [21]


def test_a_merges_input_is_quiet_while_the_other_input_runs_here() -> None:
    """A merge of 1 and 2 (both placed here): 1's success releases nothing while 2 runs, so
    its completion need not bring a round; 2's does (or 1's, once 2's completion is held)."""
    stock: OfferStock[Offer] = OfferStock()
    stock.placed(1, (Offer(10),), needs=((2,),))
    stock.placed(2, (Offer(10),), needs=((1,),))
    stock.placed(3, (Offer(30),), needs=((4,),))  # 4 is not placed here
    assert stock.quiet(1, pilot=7)
    assert not stock.quiet(1, pilot=7, finished={2})  # 2's completion is in: 1's releases 10
    assert not stock.quiet(3, pilot=9)  # 4 may end elsewhere: 3's success may release 30
    stock.completed(2, ok=True, pilot=8)
    assert not stock.quiet(1, pilot=7)
