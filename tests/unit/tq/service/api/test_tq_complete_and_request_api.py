"""``POST /api/v1/pilots/{id}/complete-and-request``: a busy pilot's report and its next task in
one call, over a store on a SQLite file; the registration's answer says the service takes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from glidein_ext.tq.client.protocol import (
    CompleteAndRequest,
    CompleteAndRequestAnswer,
    Completion,
    CompletionAnswer,
    RegisterAnswer,
    Registration,
    parse,
    parse_assignment,
    to_json,
)
from glidein_ext.tq.service.server import build_app, open_store
from glidein_ext.tq.service.settings import TqSettings

OP = {"Authorization": "Bearer op"}
PI = {"Authorization": "Bearer pi"}
CALL = "/api/v1/pilots/{}/complete-and-request"


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


def _register(client: TestClient) -> RegisterAnswer:
    body = to_json(Registration(site="S", host="wn"))
    return parse(RegisterAnswer, client.post("/api/v1/pilots", json=body, headers=PI).json())


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
