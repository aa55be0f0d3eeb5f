"""What a task says goes into a glidein's job ad one attribute a line: the Task Queue refuses, at
submit (422, nothing stored), a task name, a command word or an LFN with a character that is
not printable -- every line end str.splitlines() knows (U+2028, U+2029, NEL, VT, FF, FS/GS/RS)
among them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from glidein_ext.errors import WorkflowError
from glidein_ext.tq.workflow import parse_workflow
from tests.unit.tq.service.api.test_tq_hostile_api import OP, _app, _task

LINE_ENDS = ["\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
OTHERS = ["\t", "\u200b", "\x7f", "\u00ad"]  # tab, zero-width space, DEL, soft hyphen
INJECTED = "RequestMemory = 999999"


def cases(char: str) -> dict[str, dict[str, Any]]:
    return {
        "task name": {"tasks": [_task(name=f"t{char}{INJECTED}")]},
        "command word": {"tasks": [_task(command=f"echo 'a{char}{INJECTED}'")]},
        "output LFN": {"tasks": [_task(outputs=[f"/store/a{char}b"])]},
        "after": {"tasks": [_task(), _task(name="u", after=[f"t{char}"])]},
        "workflow name": {"name": f"w{char}x", "tasks": [_task()]},
    }


@pytest.mark.parametrize("char", LINE_ENDS + OTHERS, ids=lambda c: f"U+{ord(c):04X}")
def test_a_task_string_that_could_end_an_ad_line_is_refused_at_submit(
    tmp_path: Path, char: str
) -> None:
    http, store = _app(tmp_path)
    with http:
        for case, body in cases(char).items():
            with pytest.raises(WorkflowError, match=r"not printable|white space"):
                parse_workflow(body)
            answer = http.post(
                "/api/v1/workflows",
                content=json.dumps(body),
                headers={**OP, "Content-Type": "application/json"},
            )
            assert answer.status_code == 422, (case, answer.text)
    assert store.status().workflows == ()


def test_printable_text_of_any_script_is_still_welcome(tmp_path: Path) -> None:
    body = {
        "name": "Überfluss - 流れ",
        "tasks": [_task(name="tâche 1", command="echo 'ça va: \"oui\" \\\\ 😀'")],
    }
    http, _ = _app(tmp_path)
    with http:
        answer = http.post(
            "/api/v1/workflows",
            content=json.dumps(body),
            headers={**OP, "Content-Type": "application/json"},
        )
    assert answer.status_code == 200, answer.text
