"""The shared pilot token beside per-pilot credentials, against a real `tq serve` of the
distributed architecture (Delgado Peris 2014 §III.B): a pilot registered with the shared token
that becomes its site's master acts for the shared token's pilots only (docs/pool.md: the shared
token may not act on a credential's pilots)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from glidein_ext.testbed.tq_server import OPERATOR, PILOT, TqServer
from tests.support.rawhttp import post_json


def _post(server: TqServer, path: str, body: Any, token: str) -> Any:
    code, text = post_json(server.url, path, body, token)
    assert code == 200, (path, code, text)
    return json.loads(text)


def _register(server: TqServer, token: str, port: int) -> int:
    body = {"site": "D", "host": f"wn{port}", "dht_address": f"127.0.0.1:{port}"}
    return int(_post(server, "/api/v1/pilots", body, token)["pilot_id"])


def test_a_shared_token_master_cannot_act_for_a_credentials_pilots(
    tq_server: Callable[..., TqServer],
) -> None:
    server = tq_server(architecture="distributed")
    tasks = [{"name": f"t{i}", "command": "true"} for i in range(3)]
    _post(server, "/api/v1/workflows", {"tasks": tasks}, OPERATOR)
    minted = _post(server, "/api/v1/credentials", {"site": "D", "count": 2}, OPERATOR)
    busy_token, idle_token = (f"{c['secret']}" for c in minted["credentials"])
    master = _register(server, PILOT, 4001)  # the shared token's pilot, the lowest id
    busy = _register(server, busy_token, 4002)  # a credential's pilot, running task 1
    idle = _register(server, idle_token, 4003)  # a credential's pilot, idle
    shared = _register(server, PILOT, 4004)  # another of the shared token's pilots
    running = _post(server, f"/api/v1/pilots/{busy}/request", {}, busy_token)["task"]
    assert running is not None
    task_id, attempt = running["task_id"], running["attempt"]

    granted = _post(server, "/api/v1/sites/D/master", {"pilot_id": master}, PILOT)
    assert granted["granted"]
    epoch = granted["master"]["epoch"]
    roster = [p["pilot_id"] for p in granted["pilots"]]
    assert roster == [master, shared]  # itself and its token's pilot: no credential's, no key

    done = {"task_id": task_id, "attempt": attempt, "exit_code": 0, "outputs": []}
    sync = {
        "pilot_id": master,
        "epoch": epoch,
        "want": 5,
        "completions": [{"pilot_id": busy, "completion": done}],
        "dead": [busy],
        "release": [task_id],
        "pilots": [busy, idle, shared],
    }
    answer = _post(server, "/api/v1/sites/D/sync", sync, PILOT)
    (result,) = answer["results"]
    assert not result["accepted"] and "own credential" in result["state"], result
    assert [k["pilot_id"] for k in answer["keys"]] == [shared] and answer["gone"] == []
    offered = [task["task_id"] for task in answer["tasks"]]
    assert task_id not in offered and len(offered) == 2

    pairs = [{"task_id": offered[0], "pilot_id": idle}, {"task_id": offered[1], "pilot_id": shared}]
    assign = {"pilot_id": master, "epoch": epoch, "pairs": pairs, "completions": []}
    answer = _post(server, "/api/v1/sites/D/assign", {**assign, "round": {}}, PILOT)
    assert [(p["task_id"], p["pilot_id"]) for p in answer["accepted"]] == [(offered[1], shared)]
    (refused,) = answer["refused"]
    assert refused["pilot_id"] == idle and "own credential" in refused["reason"], refused

    # The credential's pilots are as they were: the busy one still runs its task and reports it.
    status = server.operator().status()
    assert status.pilots["D"] == {"busy": 2, "idle": 2}
    ended = _post(server, f"/api/v1/pilots/{busy}/complete", done, busy_token)
    assert ended["accepted"], ended
