"""The API in process (FastAPI's test client): tokens, OpenAPI, errors, the protocol's shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from glidein_ext.tq.client.protocol import (
    CompletionAnswer,
    HeartbeatAnswer,
    Neighbour,
    RegisterAnswer,
    Registration,
    Status,
    parse,
    parse_assignment,
    to_json,
)
from glidein_ext.tq.service.server import build_app, open_store
from glidein_ext.tq.service.settings import TqSettings
from glidein_ext.tq.service.store import Store
from glidein_ext.tq.workflow import generate

OP = {"Authorization": "Bearer op"}
PI = {"Authorization": "Bearer pi"}


def _app(tmp_path: Path, **settings: Any) -> tuple[TestClient, Store]:
    """The API over a store on a SQLite file; the store too, to compare with what it returns."""
    config = TqSettings(
        database=str(tmp_path / "api.sqlite"),
        operator_token="op",  # noqa: S106 (a test token)
        pilot_token="pi",  # noqa: S106
        **settings,
    )
    store = open_store(config)
    return TestClient(build_app(store, config)), store


def _client(tmp_path: Path) -> TestClient:
    return _app(tmp_path)[0]


def test_tokens_are_separate_for_pilots_and_operators(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        assert client.get("/api/v1/status").status_code == 401
        assert client.get("/api/v1/status", headers=PI).status_code == 401
        assert client.get("/api/v1/status", headers=OP).status_code == 200
        body = {"site": "S", "host": "h"}
        assert client.post("/api/v1/pilots", json=body, headers=OP).status_code == 401
        assert client.post("/api/v1/pilots", json=body, headers=PI).status_code == 200


def test_openapi_describes_the_protocol(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        paths = client.get("/openapi.json").json()["paths"]
    for path in (
        "/api/v1/pilots",
        "/api/v1/pilots/{pilot_id}/request",
        "/api/v1/pilots/{pilot_id}/heartbeat",
        "/api/v1/pilots/{pilot_id}/complete",
        "/api/v1/pilots/{pilot_id}",
        "/api/v1/workflows",
        "/api/v1/status",
    ):
        assert path in paths


def test_protocol_round_trip_and_errors(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        bad = client.post("/api/v1/workflows", json={"tasks": [{"name": "x"}]}, headers=OP)
        assert bad.status_code == 422 and "task 'x', field 'command'" in bad.json()["detail"]
        wf = client.post("/api/v1/workflows", json=generate("w1", scale=1 / 80), headers=OP)
        assert wf.json() == {"workflow_id": 1, "tasks": 2}
        reg = client.post(
            "/api/v1/pilots", json={"site": "S", "host": "h", "ttl": 7200}, headers=PI
        )
        pilot = reg.json()
        assert pilot["pilot_id"] == 1 and pilot["others"] == [] and pilot["dht_id"] is None
        task = client.post("/api/v1/pilots/1/request", json={}, headers=PI).json()["task"]
        assert task["name"] == "w1-s0-0000"
        done = {
            "task_id": task["task_id"],
            "attempt": 1,
            "exit_code": 0,
            "outputs": task["outputs"],
        }
        first = client.post("/api/v1/pilots/1/complete", json=done, headers=PI).json()
        second = client.post("/api/v1/pilots/1/complete", json=done, headers=PI).json()
        assert first["accepted"] and second["duplicate"] and not second["accepted"]
        assert client.post("/api/v1/pilots/9/heartbeat", json={}, headers=PI).status_code == 404
        assert client.delete("/api/v1/pilots/1", headers=PI).status_code == 200
        assert client.post("/api/v1/pilots/1/request", json={}, headers=PI).status_code == 404


def test_settings_layers(tmp_path: Path) -> None:
    config = tmp_path / "tq.toml"
    config.write_text('wait_for_data = 5\ncache_mode = "centralized"\n')
    settings = TqSettings.load(
        str(config), env={"GLIDEIN_EXT_TQ_WAIT_FOR_DATA": "7"}, overrides={"port": 0}
    )
    assert (settings.wait_for_data, settings.cache_mode, settings.port) == (7, "centralized", 0)


def test_the_wire_parses_back_into_what_the_store_returned(tmp_path: Path) -> None:
    """The JSON the API sends is the protocol's dataclasses, field for field."""
    http, store = _app(tmp_path, heartbeat_interval=9)
    with http:
        http.post("/api/v1/workflows", json=generate("w1", scale=1 / 80), headers=OP)
        first = Registration(site="S", host="wn", cache_dir="/c1", cached=("/a",), ttl=3600)
        reg = http.post("/api/v1/pilots", json=to_json(first), headers=PI).json()
        assert parse(RegisterAnswer, reg) == RegisterAnswer(
            1, 9, complete_and_request=True, batched_reports=True
        )
        second = to_json(Registration(site="S", host="wn", cache_dir="/c2"))
        answer = http.post("/api/v1/pilots", json=second, headers=PI).json()
        assert parse(RegisterAnswer, answer).others == (Neighbour(1, "/c1"),)
        beat = http.post("/api/v1/pilots/1/heartbeat", json={}, headers=PI).json()
        assert parse(HeartbeatAnswer, beat) == store.heartbeat(1)
        task = parse_assignment(http.post("/api/v1/pilots/1/request", json={}, headers=PI).json())
        assert task is not None and task == store.request(1)  # asked again: the same task
        done = {"task_id": task.task_id, "attempt": 1, "exit_code": 0, "outputs": task.outputs}
        answer = http.post("/api/v1/pilots/1/complete", json=done, headers=PI).json()
        assert parse(CompletionAnswer, answer) == CompletionAnswer(True, False, "done")
        status = http.get("/api/v1/status", headers=OP).json()
        assert parse(Status, status) == store.status() and to_json(store.status()) == status
        # step1 waits for pilot 1, which holds its input (waitForData): nothing for pilot 2
        nothing = http.post("/api/v1/pilots/2/request", json={}, headers=PI).json()
        assert nothing == {"task": None} and parse_assignment(nothing) is None
