"""The distributed architecture's calls and the counters over HTTP, in process (Delgado Peris 2014
§III):
tokens, a stale master's 409, bodies checked, every pilot request counted by kind."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from glidein_ext.tq.client.protocol import ClaimAnswer, RegisterAnswer, SiteSyncAnswer, parse
from glidein_ext.tq.service.server import build_app, open_store
from glidein_ext.tq.service.settings import TqSettings
from glidein_ext.tq.workflow import generate

OP = {"Authorization": "Bearer op"}
PI = {"Authorization": "Bearer pi"}


def _client(tmp_path: Path) -> TestClient:
    config = TqSettings(
        database=str(tmp_path / "api.sqlite"),
        operator_token="op",  # noqa: S106 (a test token)
        pilot_token="pi",  # noqa: S106
        architecture="distributed",
    )
    return TestClient(build_app(open_store(config), config))


def test_the_masters_calls_over_http(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        answers = []
        for i in range(3):
            body = {"site": "S", "host": f"h{i}", "dht_address": f"127.0.0.1:{4000 + i}"}
            reply = client.post("/api/v1/pilots", json=body, headers=PI)
            answers.append(parse(RegisterAnswer, reply.json()))
        master = answers[0].master
        assert master is not None and answers[2].master == master
        assert answers[0].architecture == "distributed" and answers[0].site_key
        assert client.post("/api/v1/workflows", json=generate("w1", 2 / 80), headers=OP).is_success
        call = {"pilot_id": master.pilot_id, "epoch": master.epoch, "want": 5}
        assert client.post("/api/v1/sites/S/sync", json=call, headers=OP).status_code == 401
        synced = client.post("/api/v1/sites/S/sync", json=call, headers=PI)
        assert len(parse(SiteSyncAnswer, synced.json()).tasks) == 2
        stale = {**call, "epoch": master.epoch + 1}
        refused = client.post("/api/v1/sites/S/sync", json=stale, headers=PI)
        assert refused.status_code == 409 and "not the master" in refused.json()["detail"]
        pairs = {"pilot_id": 2, "epoch": 1, "pairs": [{"task_id": 1, "pilot_id": 2}]}
        assert client.post("/api/v1/sites/S/assign", json=pairs, headers=PI).status_code == 409
        bad = {**call, "want": -1}
        assert client.post("/api/v1/sites/S/sync", json=bad, headers=PI).status_code == 422
        claim = client.post("/api/v1/sites/S/master", json={"pilot_id": 2}, headers=PI)
        assert not parse(ClaimAnswer, claim.json()).granted
        counters = client.get("/api/v1/counters", headers=OP).json()
        assert client.get("/api/v1/counters", headers=PI).status_code == 401
    assert counters["overall"]["requests"] == {"register": 3, "sync": 4, "assign": 1, "claim": 1}
    (workflow,) = counters["workflows"]
    assert workflow["requests"] == {"sync": 4, "assign": 1, "claim": 1}
    assert [m["pilot_id"] for m in counters["masters"]["S"]] == [master.pilot_id]


def test_the_masters_round_phases_reach_the_counters_and_are_bounded(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        body = {"site": "S", "host": "h0", "dht_address": "127.0.0.1:4000"}
        answer = parse(RegisterAnswer, client.post("/api/v1/pilots", json=body, headers=PI).json())
        master = answer.master
        assert master is not None
        call = {"pilot_id": master.pilot_id, "epoch": master.epoch}
        assert client.post("/api/v1/sites/S/sync", json=call, headers=PI).is_success  # none
        timed = {**call, "phases": [["sync", 0.25], ["broadcast", 1.5]]}
        for _ in range(2):
            assert client.post("/api/v1/sites/S/sync", json=timed, headers=PI).is_success
        for bad in ([["sync", -1.0]], [["Sync!", 1.0]], [["sync", 1.0]] * 17):
            refused = client.post("/api/v1/sites/S/sync", json={**call, "phases": bad}, headers=PI)
            assert refused.status_code == 422, bad
        counters = client.get("/api/v1/counters", headers=OP).json()
    assert counters["phases"] == {"S": {"sync": 0.5, "broadcast": 3.0}}
