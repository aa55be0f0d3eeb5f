"""The courier's offer board (Lee 2003 4.2.3), pure: offers taken oldest first, only for tasks
at or above the threshold, each woken once."""

from __future__ import annotations

import functools
import threading

from glidein_ext.tq.service.pool.courier import OfferBoard


def test_urgent_tasks_take_the_oldest_offers_and_wake_them() -> None:
    board = OfferBoard(threshold=100)
    woken: list[int] = []
    offers = [board.offer(p, float(p), functools.partial(woken.append, p)) for p in (11, 12, 13)]
    assert len(board) == 3
    assert board.urgent([0, 99, 100, 500]) == 2
    taken = board.push(board.urgent([0, 99, 100, 500]))
    assert [o.pilot_id for o in taken] == [11, 12] and woken == [11, 12]
    assert all(o.pushed for o in taken) and not offers[2].pushed
    assert len(board) == 1 and board.pushed == 2
    assert board.push(5) == [offers[2]] and woken == [11, 12, 13]
    assert board.push(1) == [] and len(board) == 0


def test_a_withdrawn_offer_is_never_pushed() -> None:
    board = OfferBoard(threshold=1)
    woken: list[int] = []
    first = board.offer(1, 0.0, lambda: woken.append(1))
    board.offer(2, 1.0, lambda: woken.append(2))
    board.withdraw(first)  # its request ended (timed out, answered)
    board.withdraw(first)  # twice is harmless
    board.push(2)
    assert woken == [2]
    assert board.push(0) == [] and board.push(-3) == []


def test_offers_and_pushes_from_many_threads_wake_each_offer_once() -> None:
    board = OfferBoard(threshold=1)
    woken: list[int] = []
    lock = threading.Lock()

    def wake(pilot: int) -> None:
        with lock:
            woken.append(pilot)

    for p in range(200):
        board.offer(p, 0.0, functools.partial(wake, p))
    threads = [threading.Thread(target=board.push, args=(10,)) for _ in range(30)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(woken) == list(range(200)) and board.pushed == 200 and len(board) == 0
