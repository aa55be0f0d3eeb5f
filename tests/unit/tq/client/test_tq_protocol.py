"""The protocol's messages read from JSON: a malformed answer is one clear error naming the call
and the field (the round trip through the API is in ``test_tq_api.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from glidein_ext.errors import TaskQueueError, TaskQueueForbidden, TaskQueueNotFound
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.protocol import (
    CompleteAndRequestAnswer,
    Completion,
    CompletionAnswer,
    HeartbeatAnswer,
    Neighbour,
    PilotReport,
    Placed,
    RegisterAnswer,
    Registration,
    ReportOutcome,
    ReportsAnswer,
    Status,
    TaskAssignment,
    TaskOffer,
    WorkflowStatus,
    parse,
    to_json,
)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"task": {"task_id": 1}}, "TaskAssignment: field 'attempt': missing"),
        (
            {"task": {"task_id": "1"}},
            "TaskAssignment: field 'task_id': expected an integer, got str",
        ),
        ({}, "TaskResponse: missing field 'task'"),
        ([], "TaskResponse: expected a JSON object, got list"),
    ],
)
def test_malformed_answer_is_a_task_queue_error(
    monkeypatch: pytest.MonkeyPatch, answer: Any, message: str
) -> None:
    client = TqClient("http://127.0.0.1:1", "pi")
    monkeypatch.setattr(client, "call", lambda *args: answer)
    with pytest.raises(TaskQueueError, match="malformed answer") as info:
        client.request(1)
    assert str(info.value).startswith("http://127.0.0.1:1/api/v1/pilots/1/request: ")
    assert message in str(info.value)


def test_readers_refuse_wrong_types() -> None:
    with pytest.raises(ValueError, match="'accepted': expected a boolean, got int"):
        parse(CompletionAnswer, {"accepted": 1, "duplicate": False, "state": "done"})
    with pytest.raises(ValueError, match="'pilot_id': expected an integer, got a boolean"):
        parse(Neighbour, {"pilot_id": True, "cache_dir": ""})
    with pytest.raises(ValueError, match="field 'inputs': expected a string, got int"):
        parse(
            TaskAssignment, {"task_id": 1, "attempt": 1, "name": "n", "command": "c", "inputs": [1]}
        )
    nested = {"workflows": [], "pilots": {"S": {"idle": "1"}}, "completions": 0}
    with pytest.raises(ValueError, match="Status: field 'pilots': 'S': 'idle': expected an int"):
        parse(Status, {**nested, "queued_groups": 0})


def test_defaults_may_be_missing_or_null_and_json_round_trips() -> None:
    # an older TQ's extra field (``cache_mode``) is ignored
    old = {"pilot_id": 3, "heartbeat_interval": 30, "cache_mode": "x", "architecture": "x"}
    answer = parse(RegisterAnswer, old)
    assert answer == RegisterAnswer(3, 30, architecture="x")
    sent = {**to_json(answer), "dht_id": None, "site_contacts": None}
    assert parse(RegisterAnswer, sent) == answer
    status = Status((WorkflowStatus(1, "w", 5, {"done": 2}),), {"S": {"idle": 1}}, 2, 0)
    assert parse(Status, to_json(status)) == status
    wire = to_json(Registration(site="S", host="h", cached=("/a",), attributes={"Cpus": 2}))
    assert wire["cached"] == ["/a"] and wire["attributes"] == {"Cpus": 2} and wire["ttl"] is None


def test_the_heartbeats_needed_files_are_optional_both_ways() -> None:
    """An older Task Queue says nothing (None: unknown, not "nothing needed"); an older pilot
    ignores the field."""
    assert parse(HeartbeatAnswer, {"others": []}) == HeartbeatAnswer((), None)
    new = HeartbeatAnswer((Neighbour(2, "/c"),), ("/a", "/b"))
    assert parse(HeartbeatAnswer, to_json(new)) == new
    assert parse(HeartbeatAnswer, {"needed_cached": []}).needed_cached == ()
    with pytest.raises(ValueError, match="needed_cached"):
        parse(HeartbeatAnswer, {"needed_cached": [1]})


def test_a_placed_pairs_successors_travel_with_what_each_still_needs() -> None:
    merge = TaskOffer(30, "m", "true", ("/fa", "/fc"), ("/fm",), 60)
    placed = Placed(10, 2, 1, (merge,), False, ((11,),))
    assert parse(Placed, to_json(placed)) == placed
    assert parse(Placed, {"task_id": 10, "pilot_id": 2, "attempt": 1}).needs == ()  # older TQ
    with pytest.raises(ValueError, match="needs"):
        parse(Placed, {**to_json(placed), "needs": [["11"]]})


def test_reports_outcomes_become_each_reports_answer_or_its_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``TqClient.reports``: each outcome in its place, an error by its status as the call alone
    would raise it; an answer with a wrong number of outcomes is malformed."""
    done = CompleteAndRequestAnswer(CompletionAnswer(True, False, "done"), None)
    outcomes = (
        ReportOutcome(200, done),
        ReportOutcome(404, None, "pilot 9 is not registered"),
        ReportOutcome(403, None, "pilot 8 is not a pilot of credential 2"),
        ReportOutcome(503, None, "database unavailable"),
        ReportOutcome(200, None),  # an answer missing
    )
    answer = to_json(ReportsAnswer(outcomes))
    assert parse(ReportsAnswer, answer) == ReportsAnswer(outcomes)
    client = TqClient("http://127.0.0.1:1", "pi")
    monkeypatch.setattr(client, "call", lambda *args: answer)
    reports = [PilotReport(i, Completion(i, 1, 0)) for i in range(1, 6)]
    found = client.reports(reports)
    assert found[0] == done
    assert isinstance(found[1], TaskQueueNotFound) and "pilot 9" in str(found[1])
    assert isinstance(found[2], TaskQueueForbidden)  # named by the instance, as the call alone
    assert str(found[2]) == "http://127.0.0.1:1: pilot 8 is not a pilot of credential 2"
    assert type(found[3]) is TaskQueueError and "HTTP 503" in str(found[3])
    assert type(found[4]) is TaskQueueError and "malformed" in str(found[4])
    with pytest.raises(TaskQueueError, match="5 outcomes for 4 reports"):
        client.reports(reports[:4])
