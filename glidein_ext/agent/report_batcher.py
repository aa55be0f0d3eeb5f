"""The pilots of one process send their task reports together (``pilot run --pilots N
--batch-reports``).

A busy pilot reports each task's end with ``complete-and-request``, whose answer is its next task
(Hasham 2011 §IV-E: the report asks for it, late binding kept).  Pilots of one process whose
reports are ready at the same moment send them in one request (``TqClient.reports``): the Task
Queue reads one HTTP request, its headers and token once for all of them, and serves each report
as it would serve it alone (its own answer or error; one transaction for the batch unless one
report fails).  No report waits for
others to come: a report goes at once when no request of the batcher is under way, else with
those that arrived meanwhile as soon as that request returns; like a database's group commit,
batches grow with the load and a quiet process sends its reports one by one.

A report's own error (its pilot unknown to the Task Queue, say) is raised to that pilot only; the
request's failure (no instance answered) to every pilot whose report it carried, each of which
retries as it would retry its own call.  Python 3.9, standard library only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Union

from glidein_ext.errors import TaskQueueError
from glidein_ext.tq.client.limits import MAX_REPORTS
from glidein_ext.tq.client.protocol import CompleteAndRequestAnswer, Completion, PilotReport

Outcome = Union[CompleteAndRequestAnswer, TaskQueueError]
# send(reports) -> each report's answer, or the error in its place; raises the request's failure
Send = Callable[[Sequence[PilotReport]], Sequence[Outcome]]
MAX_BATCH_BYTES = 4 * 2**20  # a batch's estimated size: far below the Task Queue's body bound


class _Pending:
    """One pilot's report, waiting for its outcome; ``wake`` is held until its thread is to
    return (``done``) or to send the reports that wait (its own first)."""

    __slots__ = ("done", "outcome", "report", "size", "wake")

    def __init__(self, report: PilotReport) -> None:
        self.report = report
        self.size = _size(report)
        self.done = False
        self.outcome: Outcome | BaseException | None = None
        self.wake = threading.Lock()
        self.wake.acquire()


class ReportBatcher:
    """``complete_and_request`` for the pilots of one process, from their threads: each call
    blocks until its report's outcome is known.  ``send``: the request (``TqClient.reports``);
    ``max_reports``, ``max_bytes``: a batch's bounds (one report larger goes alone).

    One thread at a time sends (the leader); the others wait each on its own report, woken
    once: when its outcome is known, or to lead in turn when the reports waiting behind the
    leader's request include its own first."""

    def __init__(
        self,
        send: Send,
        max_reports: int = 32,
        max_bytes: int = MAX_BATCH_BYTES,
    ) -> None:
        if not 1 <= max_reports <= MAX_REPORTS:
            raise ValueError(f"max_reports must be within 1..{MAX_REPORTS}")
        self.send = send
        self.max_reports = max_reports
        self.max_bytes = max_bytes
        self._queue: list[_Pending] = []
        self._sending = False
        self._lock = threading.Lock()
        self.requests = 0  # requests sent
        self.reports = 0  # reports they carried

    def complete_and_request(
        self,
        pilot_id: int,
        completion: Completion,
        cached: Sequence[str] | None = None,
    ) -> CompleteAndRequestAnswer:
        """The report's answer, as ``TqClient.complete_and_request`` gives it; raises its error
        (or the request's) as that call would."""
        listed = None if cached is None else tuple(cached)
        mine = _Pending(PilotReport(pilot_id, completion, listed))
        with self._lock:
            self._queue.append(mine)
            lead = not self._sending
            self._sending = True
        if not lead:
            mine.wake.acquire()  # its outcome is known, or it leads now
            if mine.done:
                return _result(mine.outcome)
        while True:  # the leader: its own report is the first waiting
            with self._lock:
                batch = self._take()
            self._send(batch)
            with self._lock:
                following = self._queue[0] if self._queue else None
                if following is None:
                    self._sending = False
            for pending in batch:
                if pending is not mine:
                    pending.wake.release()
            if mine.done:
                if following is not None:
                    following.wake.release()  # the next report's thread leads
                return _result(mine.outcome)

    def _take(self) -> list[_Pending]:
        """The reports that wait, in their order, within the bounds (at least one)."""
        size = 0
        count = 0
        for pending in self._queue[: self.max_reports]:
            if count and size + pending.size > self.max_bytes:
                break
            size += pending.size
            count += 1
        batch = self._queue[:count]
        del self._queue[:count]
        return batch

    def _send(self, batch: list[_Pending]) -> None:
        """Send ``batch``; every report in it gets its outcome (never raises)."""
        self.requests += 1
        self.reports += len(batch)
        try:
            outcomes: Sequence[Outcome | BaseException] = self.send(
                [pending.report for pending in batch]
            )
            if len(outcomes) != len(batch):
                raise TaskQueueError(f"{len(outcomes)} outcomes for {len(batch)} reports")
        except BaseException as exc:  # noqa: BLE001 -- each pilot raises it from its own call
            outcomes = [exc] * len(batch)
        for pending, outcome in zip(batch, outcomes):
            pending.outcome = outcome
            pending.done = True


def _result(outcome: Outcome | BaseException | None) -> CompleteAndRequestAnswer:
    if isinstance(outcome, CompleteAndRequestAnswer):
        return outcome
    if isinstance(outcome, BaseException):
        raise outcome
    raise TaskQueueError("no outcome for the report")  # unreachable: _send gives each one


def _size(report: PilotReport) -> int:
    """A report's size on the wire, roughly (its texts and names, and room for the rest)."""
    completion = report.completion
    names = completion.outputs + (report.cached or ())
    return 512 + len(completion.report) + sum(len(name) + 4 for name in names)
