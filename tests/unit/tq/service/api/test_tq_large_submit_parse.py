"""A large submission's parse in the worker process (``tq.service.api.large_submit``): what the
worker answers gives back the workflow ``parse_workflow`` gives, or says why not."""

from __future__ import annotations

import asyncio
import json

import pytest

from glidein_ext.tq.service.api.large_submit import (
    CHUNK,
    SubmissionParser,
    parse_body,
    workflow_of,
)
from glidein_ext.tq.workflow import parse_workflow


def _body(n: int) -> dict[str, object]:
    tasks = [
        {"name": f"t{i}", "command": "true", "inputs": [f"/in/{i}"], "requirements": "true"}
        for i in range(n)
    ]
    tasks.append({"name": "merge", "command": "true", "after": [f"t{i}" for i in range(n)]})
    return {"name": "w", "available": [f"/in/{i}" for i in range(n)], "tasks": tasks}


def test_the_answer_gives_back_the_parsed_workflow_in_chunks() -> None:
    body = _body(2 * CHUNK + 5)
    kind, parsed = parse_body(json.dumps(body).encode())
    assert kind == "ok"
    assert len(parsed[1]) == 3  # chunks of CHUNK tasks
    assert workflow_of(parsed) == parse_workflow(body)


def test_a_body_that_is_no_workflow_says_why() -> None:
    assert parse_body(b"{not json") == ("json_invalid", None)
    assert parse_body(b"\xff\xfe\xfa") == ("json_invalid", None)
    assert parse_body(b"[1, 2]") == ("dict_type", None)
    kind, (reason, task, field) = parse_body(json.dumps({"tasks": [{"name": "t"}]}).encode())
    assert kind == "workflow" and task == "t" and field == "command", reason


def test_the_worker_process_parses_and_is_closed() -> None:
    parser = SubmissionParser()
    try:
        kind, parsed = asyncio.run(parser.parse(json.dumps(_body(3)).encode()))
        assert kind == "ok" and len(workflow_of(parsed).tasks) == 4
    finally:
        parser.close()
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(parser.parse(b"{}"))
