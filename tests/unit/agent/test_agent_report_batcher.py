"""``ReportBatcher``: the reports of a process's pilots that are ready at once go in one request;
each pilot gets its own answer or error, a request's failure reaches every pilot it carried."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from glidein_ext.agent.report_batcher import ReportBatcher
from glidein_ext.errors import TaskQueueError, TaskQueueNotFound
from glidein_ext.tq.client.protocol import (
    CompleteAndRequestAnswer,
    Completion,
    CompletionAnswer,
    PilotReport,
    TaskAssignment,
)


def _answer(report: PilotReport) -> CompleteAndRequestAnswer:
    """An answer that names the report's pilot (its next task's id is the pilot's)."""
    task = TaskAssignment(report.pilot_id, 1, f"next-{report.pilot_id}", "true", (), (), 60, 0)
    return CompleteAndRequestAnswer(CompletionAnswer(True, False, "done"), task)


class FakeTaskQueue:
    """Records each request; the first one waits for ``release`` (so others queue behind it)."""

    def __init__(self, hold_first: bool = True) -> None:
        self.requests: list[list[int]] = []
        self.first_sent = threading.Event()
        self.release = threading.Event()
        if not hold_first:
            self.release.set()
        self.refuse: set[int] = set()
        self.fail_next: TaskQueueError | None = None
        self._lock = threading.Lock()

    def send(self, reports: Sequence[PilotReport]) -> list[Any]:
        with self._lock:
            self.requests.append([r.pilot_id for r in reports])
        self.first_sent.set()
        self.release.wait(10)
        if self.fail_next is not None:
            failure, self.fail_next = self.fail_next, None
            raise failure
        return [
            TaskQueueNotFound(f"pilot {r.pilot_id} is gone")
            if r.pilot_id in self.refuse
            else _answer(r)
            for r in reports
        ]


def _report_from(batcher: ReportBatcher, pilot_id: int, results: dict[int, Any]) -> None:
    try:
        results[pilot_id] = batcher.complete_and_request(pilot_id, Completion(pilot_id, 1, 0))
    except Exception as exc:
        results[pilot_id] = exc


def _start(batcher: ReportBatcher, ids: Sequence[int], results: dict[int, Any]) -> list[Any]:
    threads = [
        threading.Thread(target=_report_from, args=(batcher, i, results), daemon=True) for i in ids
    ]
    for thread in threads:
        thread.start()
    return threads


def _queued(batcher: ReportBatcher, count: int) -> None:
    """Wait until ``count`` reports wait behind the request under way."""
    for _ in range(1000):
        with batcher._lock:
            if len(batcher._queue) == count:
                return
        threading.Event().wait(0.005)
    raise AssertionError(f"never {count} reports queued")


def _behind_the_first(
    batcher: ReportBatcher, tq: FakeTaskQueue, others: Sequence[int]
) -> dict[int, Any]:
    """Pilot 1 reports, and while its request is held ``others`` report; then the Task Queue
    answers.  Each pilot's answer or error."""
    results: dict[int, Any] = {}
    threads = _start(batcher, [1], results)
    assert tq.first_sent.wait(5)
    threads += _start(batcher, others, results)
    _queued(batcher, len(others))
    tq.release.set()
    for thread in threads:
        thread.join(5)
    return results


def test_a_lone_report_goes_at_once_and_gets_its_answer() -> None:
    tq = FakeTaskQueue(hold_first=False)
    batcher = ReportBatcher(tq.send)
    answer = batcher.complete_and_request(7, Completion(7, 1, 0), ["/store/a"])
    assert answer.task is not None and answer.task.task_id == 7
    assert tq.requests == [[7]]
    assert (batcher.requests, batcher.reports) == (1, 1)


def test_reports_ready_during_a_request_go_together_in_the_next() -> None:
    tq = FakeTaskQueue()
    batcher = ReportBatcher(tq.send)
    results = _behind_the_first(batcher, tq, [2, 3, 4, 5])
    assert tq.requests[0] == [1]
    assert sorted(tq.requests[1]) == [2, 3, 4, 5]
    assert len(tq.requests) == 2
    # each pilot got its own answer, not a neighbour's
    for pilot_id in range(1, 6):
        assert results[pilot_id].task.task_id == pilot_id
    assert (batcher.requests, batcher.reports) == (2, 5)


def test_a_reports_error_reaches_its_pilot_only() -> None:
    tq = FakeTaskQueue()
    tq.refuse.add(3)
    results = _behind_the_first(ReportBatcher(tq.send), tq, [2, 3, 4])
    assert isinstance(results[3], TaskQueueNotFound)
    assert "pilot 3 is gone" in str(results[3])
    for pilot_id in (1, 2, 4):
        assert results[pilot_id].task.task_id == pilot_id


def test_a_failed_request_reaches_every_pilot_it_carried_and_the_next_goes_on() -> None:
    tq = FakeTaskQueue()
    batcher = ReportBatcher(tq.send)
    tq.fail_next = TaskQueueError("cannot reach the Task Queue")  # the first request's
    results = _behind_the_first(batcher, tq, [2, 3])
    assert isinstance(results[1], TaskQueueError)  # the first request failed
    assert results[2].task.task_id == 2 and results[3].task.task_id == 3  # the second did not
    # a pilot retries its own call: the batcher serves it again
    assert batcher.complete_and_request(1, Completion(1, 1, 0)).task is not None


def test_a_batch_keeps_to_its_bounds() -> None:
    tq = FakeTaskQueue()
    _behind_the_first(ReportBatcher(tq.send, max_reports=2), tq, [2, 3, 4, 5, 6])
    assert [len(ids) for ids in tq.requests] == [1, 2, 2, 1]
    assert sorted(i for ids in tq.requests for i in ids) == [1, 2, 3, 4, 5, 6]


def test_a_report_larger_than_the_byte_bound_goes_alone() -> None:
    tq = FakeTaskQueue()
    batcher = ReportBatcher(tq.send, max_bytes=4000)
    results: dict[int, Any] = {}
    threads = _start(batcher, [1], results)
    assert tq.first_sent.wait(5)
    big = Completion(2, 1, 0, report="x" * 5000)

    def report_big() -> None:
        results[2] = batcher.complete_and_request(2, big)

    threads.append(threading.Thread(target=report_big, daemon=True))
    threads[-1].start()
    _queued(batcher, 1)
    threads += _start(batcher, [3], results)
    _queued(batcher, 2)
    tq.release.set()
    for thread in threads:
        thread.join(5)
    assert tq.requests == [[1], [2], [3]]
    assert results[2].task.task_id == 2


def test_bounds_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="max_reports"):
        ReportBatcher(lambda reports: [], max_reports=0)
    with pytest.raises(ValueError, match="max_reports"):
        ReportBatcher(lambda reports: [], max_reports=65)


def test_many_pilots_reporting_at_random_each_get_their_own_answers() -> None:
    """16 threads, 40 reports each, a Task Queue that answers after a random moment: every
    report answered once, with its own pilot's answer; nothing left waiting."""
    rng = random.Random(7)
    sent: list[int] = []

    def send(reports: Sequence[PilotReport]) -> list[Any]:
        sent.append(len(reports))
        time.sleep(rng.random() / 2000)
        return [_answer(r) for r in reports]

    batcher = ReportBatcher(send, max_reports=5)
    wrong: list[Any] = []

    def pilot(pilot_id: int) -> None:
        for _ in range(40):
            answer = batcher.complete_and_request(pilot_id, Completion(pilot_id, 1, 0))
            if answer.task is None or answer.task.task_id != pilot_id:
                wrong.append(answer)

    threads = [threading.Thread(target=pilot, args=(i,), daemon=True) for i in range(1, 17)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    assert not wrong
    assert sum(sent) == batcher.reports == 16 * 40
    assert max(sent) <= 5 and batcher.requests == len(sent) < 16 * 40
