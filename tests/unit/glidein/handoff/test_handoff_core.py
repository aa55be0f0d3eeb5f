"""The hand-off of Task Queue tasks from a glidein's agent to its startd (glidein.handoff.core,
pure) and the board's waits around it (glidein.handoff.board, threads with a fake clock)."""

from __future__ import annotations

import threading
import time

from glidein_ext.glidein.handoff.board import Board
from glidein_ext.glidein.handoff.core import (
    EndKind,
    HandedTask,
    HandoffLedger,
    SlotView,
    Stage,
    TaskEnd,
)
from tests.support.clock import Clock

SLOT = SlotView("slot1@g", cpus=2, memory=1024, disk=10_000, total_cpus=2, total_memory=1024)


def task(task_id: int, cpus: int = 1, memory: int = 256, attempt: int = 1) -> HandedTask:
    key = (task_id, attempt)
    return HandedTask(key, 0, cpus, memory, 100, {"ClusterId": task_id}, secret=f"s{task_id}")


def test_room_comes_from_the_last_fetch_less_what_is_promised() -> None:
    core = HandoffLedger(room_ttl=60)
    assert core.room(0) == 0  # no fetch seen: a lane must not ask
    assert core.take(SLOT, 0) is None  # a fetch with nothing offered tells the room
    assert core.room(1) == 2
    assert core.begin_ask(1) and core.room(1) == 1  # an ask holds a CPU of room
    core.end_ask()
    assert core.offer(task(1), 2) and core.room(2) == 1  # an offered task holds its CPUs
    assert core.room(100) == 0  # the last fetch is too old: the startd may be gone
    core.close("retiring", 3)
    assert core.room(3) == 0 and not core.begin_ask(3)


def test_a_task_goes_through_its_stages_to_its_exit_code() -> None:
    core = HandoffLedger()
    core.offer(task(1), 0)
    handed = core.take(SLOT, 1)
    assert handed is not None and handed.stage is Stage.HANDED and core.free == (1, 768, 9900)
    core.replied((1, 1), True, 2)
    assert core.prepared((1, 1), starter=4242, now=3)
    assert core.tasks[(1, 1)].stage is Stage.RUNNING
    core.exited((1, 1), "exit", 7, None, 4)
    assert core.finish((1, 1)) == TaskEnd(EndKind.EXITED, 7)
    assert core.free == (2, 1024, 10_000)  # its dynamic slot's CPUs count again at once
    assert core.finish((1, 1)) is None  # forgotten


def test_only_a_fitting_task_is_handed_oldest_first() -> None:
    core = HandoffLedger()
    core.offer(task(1, cpus=4), 0)  # too big for the slot
    core.offer(task(2, memory=2048), 1)  # too much memory
    core.offer(task(3), 2)
    core.offer(task(4), 3)
    first = core.take(SLOT, 4)
    assert first is not None and first.key == (3, 1)
    assert core.fitting()
    second = core.take(SlotView("s", 1, 768, 9900, 2, 1024), 5)
    assert second is not None and second.key == (4, 1)
    assert core.take(SlotView("s", 0, 512, 9800, 2, 1024), 6) is None


def test_evicted_by_htcondor_or_vanished_starter_is_not_the_tasks_fault() -> None:
    core = HandoffLedger()
    for key in (1, 2, 3):
        core.offer(task(key), 0)
        assert core.take(SlotView("s", 4, 4096, 10_000, 4, 4096), 0) is not None
        assert core.prepared((key, 1), starter=100 + key, now=1)
    core.exited((1, 1), "evict", None, None, 2)  # vacated: JOB_EXIT says so
    core.evicting((2, 1))  # EVICT_CLAIM came first, then a normal-looking exit
    core.exited((2, 1), "exit", 0, None, 2)
    assert core.tick(3, alive=lambda pid: pid != 103) == [(3, 1)]  # no JOB_EXIT, starter gone
    for key in (1, 2, 3):
        end = core.finish((key, 1))
        assert end is not None and end.kind is EndKind.EVICTED, (key, end)


def test_the_agents_own_kill_is_the_tasks_failure() -> None:
    core = HandoffLedger()
    core.offer(task(1), 0)
    core.take(SLOT, 0)
    core.prepared((1, 1), 10, 0)
    core.killed((1, 1), "killed at its max_runtime of 5 s")
    core.exited((1, 1), "exit", None, 15, 9)
    assert core.finish((1, 1)) == TaskEnd(EndKind.EXITED, -15, "killed at its max_runtime of 5 s")


def test_refusals_and_silence_send_a_task_back_then_cancel_it() -> None:
    core = HandoffLedger(reply_timeout=10, max_rejections=2)
    core.offer(task(1), 0)
    core.take(SLOT, 0)
    core.replied((1, 1), False, 1)
    assert core.tasks[(1, 1)].stage is Stage.OFFERED and core.free == (2, 1024, 10_000)
    core.take(SLOT, 2)
    assert core.tick(20, alive=lambda pid: True) == [(1, 1)]  # no verdict: offered again
    assert core.tasks[(1, 1)].stage is Stage.OFFERED
    core.take(SLOT, 21)
    core.replied((1, 1), False, 22)
    assert core.finish((1, 1)) == TaskEnd(EndKind.CANCELLED, detail="the startd refused it 2 times")


def test_a_task_not_held_any_more_must_not_start() -> None:
    core = HandoffLedger()
    assert not core.prepared((9, 1), 10, 0)  # never offered (another pilot has it by now)
    core.offer(task(1), 0)
    assert not core.prepared((1, 1), 10, 0)  # offered, but no startd took it
    assert core.withdraw((1, 1), "stopping")
    assert core.finish((1, 1)) == TaskEnd(EndKind.CANCELLED, detail="stopping")


def test_closing_cancels_only_what_the_startd_does_not_have() -> None:
    core = HandoffLedger()
    core.offer(task(1), 0)
    core.offer(task(2), 0)
    core.take(SLOT, 1)
    assert core.close("retiring", 2) == [(2, 1)]
    assert core.take(SLOT, 3) is None and not core.offer(task(3), 3)
    assert core.tasks[(1, 1)].stage is Stage.HANDED  # it runs to its end


def test_a_fetch_waits_for_the_task_an_asking_lane_gets() -> None:
    clock = Clock(0.0)
    board = Board(fetch_wait=10, clock=clock)
    assert board.fetch(SLOT) is None  # nobody asking: nothing, but the room is now known
    stop, answered = threading.Event(), threading.Event()
    got: list[str] = []

    def lane() -> None:
        if board.wait_room(stop, poll=0.01):  # room: it asks the Task Queue...
            answered.wait(5)  # ...which answers a little later
            board.offer(task(5))
            board.asked()
            got.append(board.wait_end((5, 1), stop, poll=0.01).kind.value)

    thread = threading.Thread(target=lane)
    thread.start()
    deadline = time.monotonic() + 5
    while board.status()["asking"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    threading.Timer(0.1, answered.set).start()
    assert board.fetch(SLOT) == {"ClusterId": 5}  # it waited for the lane's task
    board.replied((5, 1), True)
    assert board.prepared((5, 1), 77)
    assert board.busy() == 1
    board.exited((5, 1), "exit", 0, None)
    thread.join(5)
    assert got == ["exited"] and board.status()["tasks"] == {}


def test_a_closed_board_sends_its_lanes_away() -> None:
    board = Board(clock=Clock(0.0))
    board.fetch(SLOT)
    board.close("the glidein is retiring")
    assert not board.wait_room(threading.Event(), poll=0.01)
    assert board.fetch(SLOT) is None and board.closed


def test_a_stopping_lane_cancels_an_offered_task() -> None:
    board = Board(clock=Clock(0.0))
    board.offer(task(1))
    stop = threading.Event()
    stop.set()
    end = board.wait_end((1, 1), stop, poll=0.01)
    assert end.kind is EndKind.CANCELLED


def test_a_starter_runs_one_task_and_a_secret_names_one_task() -> None:
    """A job's own processes descend from its starter: that starter cannot take a second task,
    and only the task's own secret names it."""
    core = HandoffLedger()
    core.take(SlotView("s", 4, 4000, 10**6, 4, 4000), 0)
    for task_id in (1, 2):
        core.offer(task(task_id), 0)
    core.take(SlotView("s", 4, 4000, 10**6, 4, 4000), 1)
    core.take(SlotView("s", 3, 3000, 10**6, 4, 4000), 1)
    assert core.prepared((1, 1), 500, 2)
    assert not core.prepared((2, 1), 500, 2)  # task 1's starter (its payload) cannot take 2
    assert core.prepared((2, 1), 501, 2) and core.starter_of((2, 1)) == 501
    assert core.secret_ok((1, 1), "s1") and not core.secret_ok((1, 1), "s2")
    assert not core.secret_ok((1, 1), None) and not core.secret_ok((9, 1), "s9")
