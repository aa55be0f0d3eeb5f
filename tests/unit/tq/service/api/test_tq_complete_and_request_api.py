"""``POST /api/v1/pilots/{id}/complete-and-request``: a busy pilot's report and its next task in
one call, over a store on a SQLite file; the registration's answer says the service takes it.
``POST /api/v1/pilots/reports``: several pilots' such calls in one request, each served as the
call alone would be (its answer, or in its place the status and line the call alone would get);
one pilot's refusal changes nothing of its own and never touches the others'."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from glidein_ext.tq.client.limits import MAX_REPORTS
from glidein_ext.tq.client.protocol import (
    CompleteAndRequest,
    CompleteAndRequestAnswer,
    Completion,
    CompletionAnswer,
    PilotReport,
    RegisterAnswer,
    Registration,
    Reports,
    ReportsAnswer,
    TaskAssignment,
    parse,
    parse_assignment,
    to_json,
)
from glidein_ext.tq.service.server import build_app, open_store
from glidein_ext.tq.service.settings import TqSettings

OP = {"Authorization": "Bearer op"}
PI = {"Authorization": "Bearer pi"}
CALL = "/api/v1/pilots/{}/complete-and-request"
REPORTS = "/api/v1/pilots/reports"


def _client(tmp_path: Path, tasks: int = 3) -> TestClient:
    config = TqSettings(
        database=str(tmp_path / "api.sqlite"),
        operator_token="op",  # noqa: S106 (a test token)
        pilot_token="pi",  # noqa: S106
    )
    client = TestClient(build_app(open_store(config), config))
    workflow = {"name": "w", "tasks": [{"name": f"t{i}", "command": "true"} for i in range(tasks)]}
    client.post("/api/v1/workflows", json=workflow, headers=OP).raise_for_status()
    return client


def _register(client: TestClient, headers: dict[str, str] = PI) -> RegisterAnswer:
    body = to_json(Registration(site="S", host="wn"))
    answer = client.post("/api/v1/pilots", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    return parse(RegisterAnswer, answer.json())


def _done(task: Any) -> Any:
    return to_json(CompleteAndRequest(Completion(task.task_id, task.attempt, 0), ("/store/x",)))


def test_the_answer_carries_the_completion_and_the_next_task(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        registered = _register(client)
        assert registered.complete_and_request  # this service takes the call
        pilot = registered.pilot_id
        asked = client.post(f"/api/v1/pilots/{pilot}/request", json={}, headers=PI).json()
        task = parse_assignment(asked)
        assert task is not None
        seen = [task.task_id]
        while task is not None:
            raw = client.post(CALL.format(pilot), json=_done(task), headers=PI)
            assert raw.status_code == 200
            answer = parse(CompleteAndRequestAnswer, raw.json())
            assert answer.result == CompletionAnswer(accepted=True, duplicate=False, state="done")
            task = answer.task
            if task is not None:
                seen.append(task.task_id)
        assert len(set(seen)) == 3
        status = client.get("/api/v1/status", headers=OP).json()
        assert status["completions"] == 3


def test_a_repeated_call_is_answered_duplicate_with_the_same_task(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        pilot = _register(client).pilot_id
        task = parse_assignment(
            client.post(f"/api/v1/pilots/{pilot}/request", json={}, headers=PI).json()
        )
        assert task is not None
        first = client.post(CALL.format(pilot), json=_done(task), headers=PI).json()
        second = client.post(CALL.format(pilot), json=_done(task), headers=PI).json()
        assert second["result"]["duplicate"] and not second["result"]["accepted"]
        assert first["task"] is not None and second["task"] == first["task"]


def test_refusals_keep_their_status(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        pilot = _register(client).pilot_id
        missing = client.post(CALL.format(pilot), json={"cached": None}, headers=PI)
        assert missing.status_code == 422 and "completion" in missing.json()["detail"]
        done = _done(Completion(1, 1, 0))
        assert client.post(CALL.format(99), json=done, headers=PI).status_code == 404
        # the operator's token is no pilot's: refused as on the pilots' other calls
        plain = client.post(f"/api/v1/pilots/{pilot}/complete", json=done["completion"], headers=OP)
        refused = client.post(CALL.format(pilot), json=done, headers=OP)
        assert refused.status_code == plain.status_code == 401
        assert client.post(CALL.format(pilot), json=done).status_code == 401
        unknown = to_json(CompleteAndRequest(Completion(999, 1, 0)))
        assert client.post(CALL.format(pilot), json=unknown, headers=PI).status_code == 404


def test_the_route_is_in_the_openapi_description(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        paths = client.get("/openapi.json").json()["paths"]
        assert "post" in paths["/api/v1/pilots/{pilot_id}/complete-and-request"]
        assert "post" in paths["/api/v1/pilots/reports"]


def _take(client: TestClient, pilot: int, headers: dict[str, str] = PI) -> TaskAssignment:
    task = parse_assignment(
        client.post(f"/api/v1/pilots/{pilot}/request", json={}, headers=headers).json()
    )
    assert task is not None
    return task


def _report(pilot: int, task: TaskAssignment) -> PilotReport:
    return PilotReport(pilot, Completion(task.task_id, task.attempt, 0))


def _send(client: TestClient, reports: list[PilotReport], headers: Any = PI) -> ReportsAnswer:
    raw = client.post(REPORTS, json=to_json(Reports(tuple(reports))), headers=headers)
    assert raw.status_code == 200, raw.text
    return parse(ReportsAnswer, raw.json())


def _status(client: TestClient) -> dict[str, Any]:
    status: dict[str, Any] = client.get("/api/v1/status", headers=OP).json()
    return status


def test_each_report_gets_its_completion_and_its_own_next_task(tmp_path: Path) -> None:
    with _client(tmp_path, tasks=6) as client:
        first, second = _register(client), _register(client)
        assert first.batched_reports  # the registration says this service takes them
        held = {p.pilot_id: _take(client, p.pilot_id) for p in (first, second)}
        answer = _send(client, [_report(p, task) for p, task in held.items()])
        assert [o.status for o in answer.outcomes] == [200, 200]
        done = CompletionAnswer(accepted=True, duplicate=False, state="done")
        nexts = []
        for outcome in answer.outcomes:
            assert outcome.answer is not None and outcome.answer.result == done
            assert outcome.answer.task is not None
            nexts.append(outcome.answer.task.task_id)
        assert len({*nexts, *(t.task_id for t in held.values())}) == 4  # four distinct tasks
        assert _status(client)["completions"] == 2
        # a repeated report is answered as the call alone: duplicate, the same task held
        again = _send(client, [_report(p, task) for p, task in held.items()])
        assert [o.answer.result.duplicate for o in again.outcomes if o.answer] == [True, True]
        assert [o.answer.task.task_id for o in again.outcomes if o.answer and o.answer.task] == (
            nexts
        )
        assert _status(client)["completions"] == 2


def test_an_unknown_pilot_is_refused_in_its_place_and_the_others_are_served(
    tmp_path: Path,
) -> None:
    with _client(tmp_path, tasks=6) as client:
        pilot = _register(client).pilot_id
        task = _take(client, pilot)
        unknown = PilotReport(9999, Completion(task.task_id, task.attempt, 0))
        answer = _send(client, [unknown, _report(pilot, task)])
        refusal, served = answer.outcomes
        assert refusal.status == 404 and refusal.answer is None
        assert "9999" in refusal.detail and "\n" not in refusal.detail
        assert served.status == 200 and served.answer is not None
        assert served.answer.result.accepted
        assert _status(client)["completions"] == 1


def test_another_credentials_pilot_is_refused_and_keeps_its_task(tmp_path: Path) -> None:
    with _client(tmp_path, tasks=6) as client:
        minted = client.post(
            "/api/v1/credentials", json={"site": "S", "count": 2}, headers=OP
        ).json()["credentials"]
        mine, theirs = ({"Authorization": f"Bearer {c['secret']}"} for c in minted)
        own = _register(client, mine).pilot_id
        other = _register(client, theirs).pilot_id
        own_task, other_task = _take(client, own, mine), _take(client, other, theirs)
        answer = _send(client, [_report(other, other_task), _report(own, own_task)], mine)
        assert [o.status for o in answer.outcomes] == [403, 200]
        assert f"pilot {other}" in answer.outcomes[0].detail
        assert _status(client)["completions"] == 1
        # the other pilot's task is still its own: it reports it itself
        alone = client.post(
            f"/api/v1/pilots/{other}/complete",
            json=to_json(Completion(other_task.task_id, other_task.attempt, 0)),
            headers=theirs,
        )
        assert alone.status_code == 200 and alone.json()["accepted"]


def test_an_empty_or_oversized_batch_and_a_bad_report_are_refused_whole(tmp_path: Path) -> None:
    with _client(tmp_path, tasks=6) as client:
        pilot = _register(client).pilot_id
        task = _take(client, pilot)
        good = to_json(_report(pilot, task))
        bodies: list[dict[str, Any]] = [
            {"reports": []},
            {"reports": [good] * (MAX_REPORTS + 1)},
            {"reports": [good, {**good, "pilot_id": 0}]},
            {"reports": [good, {"pilot_id": pilot}]},  # no completion
        ]
        for body in bodies:
            raw = client.post(REPORTS, json=body, headers=PI)
            assert raw.status_code == 422, body
            assert "\n" not in raw.json()["detail"]
        assert _status(client)["completions"] == 0
        for headers in (OP, {}):  # not a pilot's token, as for a pilot's own calls
            assert (
                client.post(REPORTS, json={"reports": [good]}, headers=headers).status_code == 401
            )
        assert _status(client)["completions"] == 0
