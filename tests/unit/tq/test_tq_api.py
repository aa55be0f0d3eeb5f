"""The API in process (FastAPI's test client): tokens, OpenAPI, errors, the protocol's shapes."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from glidein_ext.tq.server import build_app, open_store
from glidein_ext.tq.settings import TqSettings, load_tq_settings
from glidein_ext.tq.workflow import generate

OP = {"Authorization": "Bearer op"}
PI = {"Authorization": "Bearer pi"}


def _client(tmp_path: Path) -> TestClient:
    settings = TqSettings(
        database=str(tmp_path / "api.sqlite"),
        operator_token="op",  # noqa: S106 (a test token)
        pilot_token="pi",  # noqa: S106
    )
    return TestClient(build_app(open_store(settings), settings))


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
    settings = load_tq_settings(
        str(config), env={"GLIDEIN_EXT_TQ_WAIT_FOR_DATA": "7"}, overrides={"port": 0}
    )
    assert (settings.wait_for_data, settings.cache_mode, settings.port) == (7, "centralized", 0)
