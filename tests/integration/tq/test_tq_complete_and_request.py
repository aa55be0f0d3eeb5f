"""A pilot agent against a real ``tq serve`` (127.0.0.1, port 0): a busy pilot reports each task's
end and asks for its next in one call (``complete-and-request``); a pilot that does not know the
call (or a service of before, whose registration answer does not offer it) still runs the same
workflow with the two calls."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from glidein_ext.agent.agent import AgentConfig, PilotAgent
from glidein_ext.agent.settings import AgentSettings
from glidein_ext.testbed.tq_server import PILOT, TqServer
from glidein_ext.tq.client.protocol import RegisterAnswer

TRIVIAL = 6


class PilotOfBefore(PilotAgent):
    """A pilot whose Task Queue's registration answer does not offer the combined call (a
    service of before): it reports and asks with two calls."""

    def register(self) -> int:
        pilot_id = super().register()
        assert self.answer is not None and self.answer.complete_and_request
        self.answer = dataclasses.replace(self.answer, complete_and_request=False)
        return pilot_id


def _workflow() -> dict[str, Any]:
    tasks: list[dict[str, Any]] = [{"name": f"t{i}", "command": "true"} for i in range(TRIVIAL)]
    # a chain: the completion of "make" releases "read" (it asks again with a plain request)
    tasks.append(
        {"name": "make", "command": "sh -c 'echo x > $TQ_OUTPUTS'", "outputs": ["/store/a"]}
    )
    tasks.append({"name": "read", "command": "sh -c 'cat $TQ_INPUTS'", "inputs": ["/store/a"]})
    return {"name": "w", "tasks": tasks}


def _run(server: TqServer, tmp_path: Path, kind: type[PilotAgent]) -> tuple[int, dict[str, Any]]:
    (tmp_path / "se").mkdir()
    operator = server.operator()
    workflow_id = operator.submit(_workflow()).workflow_id
    config = AgentConfig(
        url=server.url,
        token=PILOT,
        site="T0",
        host="wn",
        workdir=tmp_path / "pilot",
        se_dir=tmp_path / "se",
        max_idle=2,
        settings=AgentSettings(
            poll_interval=0.2, poll_max=0.5, retry_for=10, cache_min_threshold="0"
        ),
    )
    ran: list[int] = []
    thread = threading.Thread(target=lambda: ran.append(kind(config).run()))
    thread.start()
    thread.join(120)
    assert not thread.is_alive() and ran, "the pilot did not finish"
    counters = operator.call("GET", "/api/v1/counters")
    (mine,) = (w for w in counters["workflows"] if w["id"] == workflow_id)
    return ran[0], mine


@pytest.mark.parametrize("architecture", ["pre-dht", "centralized"])
def test_a_busy_pilot_makes_one_call_per_task(
    tmp_path: Path, tq_server: Callable[..., TqServer], architecture: str
) -> None:
    server = tq_server("tq", args=["--architecture", architecture])
    ran, counters = _run(server, tmp_path, PilotAgent)
    tasks = TRIVIAL + 2
    assert ran == tasks
    assert counters["tasks_done"] == tasks and counters["tasks_failed"] == 0
    requests = counters["requests"]
    assert requests.get("complete", 0) == 0  # every report went with a request for more
    # one call per task, but for the first request, the one after "make" (it released "read",
    # which the matcher learns after the commit) and the empty ones at the end
    assert requests["complete-and-request"] == tasks
    assert requests["request"] < tasks


def test_the_two_calls_still_run_the_workflow(
    tmp_path: Path, tq_server: Callable[..., TqServer]
) -> None:
    server = tq_server("tq", args=["--architecture", "centralized"])
    ran, counters = _run(server, tmp_path, PilotOfBefore)
    tasks = TRIVIAL + 2
    assert ran == tasks and counters["tasks_done"] == tasks
    requests = counters["requests"]
    assert requests["complete"] == tasks and requests.get("complete-and-request", 0) == 0
    assert requests["request"] >= tasks


def test_a_registration_answer_of_before_parses_without_the_offer() -> None:
    """A service that does not say: the pilot uses the two calls."""
    from glidein_ext.tq.client.protocol import parse

    answer = parse(RegisterAnswer, {"pilot_id": 3, "heartbeat_interval": 30})
    assert answer.complete_and_request is False
