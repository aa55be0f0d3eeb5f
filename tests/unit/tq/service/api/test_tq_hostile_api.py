"""Hostile requests to the API in process: each is answered 4xx, nothing
bad is stored, and a store holding a row it cannot load still starts and says so."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.server import build_app, open_store
from glidein_ext.tq.service.settings import TqSettings
from glidein_ext.tq.service.store import Store
from glidein_ext.tq.workflow import generate

OP = {"Authorization": "Bearer op"}
PI = {"Authorization": "Bearer pi"}
BIG = 2**63


def _settings(tmp_path: Path, **settings: Any) -> TqSettings:
    return TqSettings(
        database=str(tmp_path / "api.sqlite"),
        operator_token="op",  # noqa: S106 (a test token)
        pilot_token="pi",  # noqa: S106
        **settings,
    )


def _app(tmp_path: Path, **settings: Any) -> tuple[TestClient, Store]:
    config = _settings(tmp_path, **settings)
    store = open_store(config)
    return TestClient(build_app(store, config)), store


def _task(**fields: Any) -> dict[str, Any]:
    return {"name": "t", "command": "true", **fields}


BAD_WORKFLOWS: dict[str, dict[str, Any]] = {
    "max_runtime 10^30": {"tasks": [_task(max_runtime=10**30)]},
    "request_memory 2^63": {"tasks": [_task(request_memory=BIG)]},
    "priority 2^63": {"tasks": [_task(priority=BIG)]},
    "step 2^64": {"tasks": [_task(step=2**64)]},
    "max_retries 10^9": {"tasks": [_task(max_retries=10**9)]},
    "requirements cut short": {"tasks": [_task(requirements="TARGET.Site == ")]},
    "rank with NUL": {"tasks": [_task(rank="1\x00")]},
    "attribute name with a space": {"tasks": [_task(attributes={"a b": 1})]},
    "attribute name reserved": {"tasks": [_task(attributes={"TARGET": 1})]},
    "attribute value 2^64": {"tasks": [_task(attributes={"A": 2**64})]},
    "attribute value NaN": {"tasks": [_task(attributes={"A": float("nan")})]},
    "output LFN with NUL": {"tasks": [_task(outputs=["/store/a\x00b"])]},
    "output LFN component of 256 bytes": {"tasks": [_task(outputs=["/store/" + "x" * 256])]},
    "input LFN with '..'": {"tasks": [_task(inputs=["/store/../etc/passwd"])]},
    "relative LFN": {"tasks": [_task(outputs=["store/a"])]},
    "LFN with a newline": {"tasks": [_task(outputs=["/store/a\nb"])]},
    "command with NUL": {"tasks": [_task(command="echo \x00")]},
    "task name of 300 chars": {"tasks": [_task(name="n" * 300)]},
    "workflow name with a lone surrogate": {"name": "w\ud800", "tasks": [_task()]},
}

BAD_REGISTRATIONS: dict[str, dict[str, Any]] = {
    "requirements cut short": {"requirements": "TARGET.Site == "},
    "rank unparsable": {"rank": "1 +"},
    "cpus 2^63": {"cpus": BIG},
    "memory 10^30": {"memory": 10**30},
    "ttl 10^30": {"ttl": 10**30},
    "attribute value 2^64": {"attributes": {"A": 2**64}},
    "attribute name with a dot": {"attributes": {"a.b": 1}},
    "site with NUL": {"site": "S\x00"},
    "host with a lone surrogate": {"host": "h\udc80"},
    "cached LFN with NUL": {"cached": ["/a\x00"]},
}


@pytest.mark.parametrize("case", sorted(BAD_WORKFLOWS))
def test_a_bad_workflow_is_refused_with_422_and_nothing_stored(tmp_path: Path, case: str) -> None:
    http, store = _app(tmp_path)
    body = json.dumps(BAD_WORKFLOWS[case], allow_nan=True)
    with http:
        answer = http.post(
            "/api/v1/workflows", content=body, headers={**OP, "Content-Type": "application/json"}
        )
        assert answer.status_code == 422, answer.text
        assert len(answer.json()["detail"]) < 400  # one line, never the whole value
    assert store.status().workflows == ()
    open_store(_settings(tmp_path)).engine.dispose()  # and the TQ starts again on its database


@pytest.mark.parametrize("case", sorted(BAD_REGISTRATIONS))
def test_a_bad_registration_is_refused_with_422_and_nothing_stored(
    tmp_path: Path, case: str
) -> None:
    http, store = _app(tmp_path)
    body = json.dumps({"site": "S", "host": "h", **BAD_REGISTRATIONS[case]})
    with http:
        answer = http.post(
            "/api/v1/pilots", content=body, headers={**PI, "Content-Type": "application/json"}
        )
        assert answer.status_code == 422, answer.text
    assert store.status().pilots == {}
    open_store(_settings(tmp_path)).engine.dispose()


def test_integers_of_2_63_and_more_are_404_or_422(tmp_path: Path) -> None:
    """paths and bodies; never 500."""
    http, _store = _app(tmp_path)
    with http:
        http.post("/api/v1/workflows", json=generate("w1", scale=1 / 80), headers=OP)
        assert http.post("/api/v1/pilots", json={"site": "S", "host": "h"}, headers=PI).is_success
        for pilot in (str(BIG), str(2**64), "9" * 40, "-" + str(BIG)):
            for method, path, body in (
                ("POST", f"/api/v1/pilots/{pilot}/request", {}),
                ("POST", f"/api/v1/pilots/{pilot}/heartbeat", {}),
                (
                    "POST",
                    f"/api/v1/pilots/{pilot}/complete",
                    {"task_id": 1, "attempt": 1, "exit_code": 0},
                ),
                ("DELETE", f"/api/v1/pilots/{pilot}", None),
            ):
                answer = http.request(method, path, json=body, headers=PI)
                assert answer.status_code in (404, 422), (path, answer.status_code, answer.text)
        for field in ("task_id", "attempt", "exit_code"):
            done = {"task_id": 1, "attempt": 1, "exit_code": 0, field: BIG}
            answer = http.post("/api/v1/pilots/1/complete", json=done, headers=PI)
            assert answer.status_code == 422, (field, answer.text)


def test_a_deeply_nested_body_is_a_client_error(tmp_path: Path) -> None:
    http, _store = _app(tmp_path)
    deep = "[" * 100_000 + "]" * 100_000
    with http:
        for path, headers in (("/api/v1/workflows", OP), ("/api/v1/pilots", PI)):
            answer = http.post(
                path, content=deep, headers={**headers, "Content-Type": "application/json"}
            )
            assert answer.status_code in (400, 422), answer.text


def test_the_token_is_checked_before_the_body_is_read(tmp_path: Path) -> None:
    """an unauthenticated request is answered 401 and its body never read."""
    config = _settings(tmp_path)
    app = build_app(open_store(config), config)
    read: list[int] = []
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        read.append(1)
        return {"type": "http.request", "body": b'{"tasks": 1}'.ljust(20), "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    for token in (b"", b"Bearer wrong", b"Bearer pi"):
        read.clear()
        sent.clear()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"20")]
        if token:
            headers.append((b"authorization", token))
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/api/v1/workflows",
            "raw_path": b"/api/v1/workflows",
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 2),
        }
        asyncio.run(app(scope, receive, send))
        assert sent[0]["status"] == 401, (token, sent[0])
        if token != b"Bearer pi":  # a pilot's token is a real token: its body may be read
            assert read == [], token


def test_a_body_over_the_limit_is_413_before_it_is_read(tmp_path: Path) -> None:
    http, store = _app(tmp_path, max_request_bytes=1000)
    with http:
        big = {"tasks": [_task(name=f"t{i}") for i in range(100)]}
        answer = http.post("/api/v1/workflows", json=big, headers=OP)
        assert answer.status_code == 413, answer.text

        def chunks() -> Any:
            for _ in range(100):
                yield b" " * 100

        streamed = http.post(
            "/api/v1/pilots",
            content=chunks(),
            headers={**PI, "Content-Type": "application/json"},
        )
        assert streamed.status_code == 413, streamed.text
        small = http.post("/api/v1/workflows", json={"tasks": [_task()]}, headers=OP)
        assert small.status_code == 200, small.text
    assert len(store.status().workflows) == 1


def test_a_store_starts_on_rows_it_cannot_load_and_reports_them(tmp_path: Path) -> None:
    """rows stored by an older TQ that the matcher cannot take are skipped, logged
    and shown in /healthz; the rest of the queue works."""
    http, _store = _app(tmp_path)
    with http:
        http.post("/api/v1/workflows", json=generate("w1", scale=2 / 80), headers=OP)
        http.post("/api/v1/pilots", json={"site": "S", "host": "h"}, headers=PI)
        http.post("/api/v1/pilots", json={"site": "S", "host": "h2"}, headers=PI)
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'api.sqlite'}")
    with engine.begin() as conn:
        conn.execute(t.pilots.update().where(t.pilots.c.id == 1).values(requirements="A == "))
        spec = json.loads(
            conn.execute(sa.select(t.tasks.c.spec).where(t.tasks.c.id == 1)).scalar_one()
        )
        spec["max_runtime"] = 10**30
        conn.execute(t.tasks.update().where(t.tasks.c.id == 1).values(spec=json.dumps(spec)))
    engine.dispose()
    http, _store = _app(tmp_path)
    with http:
        health = http.get("/healthz").json()
        skipped = health["skipped_rows"]
        assert [(row["table"], row["id"]) for row in skipped] == [("pilots", 1), ("tasks", 1)]
        assert all(len(row["reason"]) < 300 for row in skipped)
        task = http.post("/api/v1/pilots/2/request", json={}, headers=PI).json()["task"]
        assert task is not None and task["task_id"] == 2


def test_a_submission_that_is_not_a_json_object_is_422_decoded_off_the_event_loop(
    tmp_path: Path,
) -> None:
    """The submission's body is decoded in the worker thread that stores it: what is not a JSON
    object is refused as FastAPI refused it (422, one line), and nothing is stored."""
    http, store = _app(tmp_path)
    cases = {
        b"{not json": "JSON decode error",
        b"\xff\xfe{}": "JSON decode error",  # not UTF-8
        b"": "JSON decode error",
        b'[{"name": "t"}]': "valid dictionary",
        b'"workflow"': "valid dictionary",
    }
    headers = {**OP, "Content-Type": "application/json"}
    with http:
        for body, said in cases.items():
            answer = http.post("/api/v1/workflows", content=body, headers=headers)
            detail = answer.json()["detail"]
            assert answer.status_code == 422 and said in detail, (body, answer.text)
        good = {"name": "w", "tasks": [_task()]}
        answer = http.post("/api/v1/workflows", json=good, headers=OP)
        assert answer.status_code == 200 and answer.json()["tasks"] == 1, answer.text
    assert len(store.status().workflows) == 1
