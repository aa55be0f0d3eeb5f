"""A pilot agent against a real ``tq serve`` (127.0.0.1, port 0): a busy pilot reports each task's
end and asks for its next in one call (``complete-and-request``); a pilot that does not know the
call (or a service of before, whose registration answer does not offer it) still runs the same
workflow with the two calls.  The pilots of one process send the reports that are ready at once
in one request (``pilot run --pilots N --batch-reports``): the workflow runs as with one call per
report, the Task Queue counts the requests the batcher sent, and each report's error reaches its
own pilot only."""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from glidein_ext.agent.agent import AgentConfig, PilotAgent
from glidein_ext.agent.settings import AgentSettings
from glidein_ext.agent.swarm import Swarm, swarm_configs
from glidein_ext.errors import TaskQueueNotFound
from glidein_ext.testbed.tq_server import PILOT, TqServer
from glidein_ext.tq.client.protocol import (
    CompleteAndRequestAnswer,
    Completion,
    PilotReport,
    RegisterAnswer,
    Registration,
)
from tests.support.cli import operator_env, run_cli

TRIVIAL = 6
PILOTS = 4


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


def _config(server: TqServer, tmp_path: Path) -> AgentConfig:
    (tmp_path / "se").mkdir()
    return AgentConfig(
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


def _run(server: TqServer, tmp_path: Path, kind: type[PilotAgent]) -> tuple[int, dict[str, Any]]:
    operator = server.operator()
    workflow_id = operator.submit(_workflow()).workflow_id
    config = _config(server, tmp_path)
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


def _counters(server: TqServer, workflow_id: int) -> dict[str, Any]:
    counters = server.operator().call("GET", "/api/v1/counters")
    (mine,) = (w for w in counters["workflows"] if w["id"] == workflow_id)
    return mine  # type: ignore[no-any-return]


def _run_swarm(swarm: Swarm) -> list[int]:
    ran: list[list[int]] = []
    thread = threading.Thread(target=lambda: ran.append(swarm.run()))
    thread.start()
    thread.join(180)
    assert not thread.is_alive() and ran, "the swarm did not finish"
    return ran[0]


class _SlowFirst:
    """The batcher's request, the first one held a moment: the other pilots' reports queue
    behind it, so that a later request surely carries several (what a loaded process does)."""

    def __init__(self, send: Callable[[Sequence[PilotReport]], Any]) -> None:
        self.send = send
        self.sizes: list[int] = []

    def __call__(self, reports: Sequence[PilotReport]) -> Any:
        if not self.sizes:
            time.sleep(1.0)
        self.sizes.append(len(reports))
        return self.send(reports)


@pytest.mark.parametrize("architecture", ["pre-dht", "centralized"])
def test_the_swarm_runs_the_workflow_with_its_reports_together(
    tmp_path: Path, tq_server: Callable[..., TqServer], architecture: str
) -> None:
    server = tq_server("tq", args=["--architecture", architecture])
    workflow_id = server.operator().submit(_workflow()).workflow_id
    swarm = Swarm(swarm_configs(_config(server, tmp_path), PILOTS), batch_reports=True)
    assert swarm.batcher is not None
    slow = swarm.batcher.send = _SlowFirst(swarm.batcher.send)
    ran = _run_swarm(swarm)
    tasks = TRIVIAL + 2
    assert sum(ran) == tasks and swarm.failed == 0
    counters = _counters(server, workflow_id)
    assert counters["tasks_done"] == tasks and counters["tasks_failed"] == 0
    requests = counters["requests"]
    # every report went with the other pilots' in the batcher's requests, counted as sent
    assert requests.get("complete", 0) == requests.get("complete-and-request", 0) == 0
    assert requests["reports"] == swarm.batcher.requests == len(slow.sizes)
    assert sum(slow.sizes) == swarm.batcher.reports
    assert max(slow.sizes) > 1  # the reports queued behind the held request went together
    assert swarm.batcher.requests < swarm.batcher.reports


def test_a_pilot_whose_task_queue_does_not_take_them_reports_alone(
    tmp_path: Path, tq_server: Callable[..., TqServer]
) -> None:
    """A service of before (its registration answer does not say ``batched_reports``): each
    pilot of the swarm makes its own ``complete-and-request``."""

    class PilotOfBefore(PilotAgent):
        def register(self) -> int:
            pilot_id = super().register()
            assert self.answer is not None and self.answer.batched_reports
            self.answer = dataclasses.replace(self.answer, batched_reports=False)
            return pilot_id

    server = tq_server("tq", args=["--architecture", "centralized"])
    workflow_id = server.operator().submit(_workflow()).workflow_id
    swarm = Swarm(swarm_configs(_config(server, tmp_path), 2), batch_reports=True)
    assert swarm.batcher is not None
    stop = threading.Event()
    agents = [PilotOfBefore(c, stop, batcher=swarm.batcher) for c in swarm.configs]
    ran: list[int] = []
    threads = [threading.Thread(target=lambda a=a: ran.append(a.run())) for a in agents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sum(ran) == TRIVIAL + 2
    requests = _counters(server, workflow_id)["requests"]
    assert requests.get("reports", 0) == 0 and swarm.batcher.requests == 0
    assert requests["complete-and-request"] >= TRIVIAL


def test_the_clients_reports_carry_each_pilots_error_in_its_place(
    tq_server: Callable[..., TqServer],
) -> None:
    server = tq_server("tq")
    server.operator().submit(_workflow())
    pilot = server.pilot()
    pilot_id = pilot.register(Registration(site="T0", host="wn")).pilot_id
    task = pilot.request(pilot_id)
    assert task is not None
    done = Completion(task.task_id, task.attempt, 0)
    unknown, answer = pilot.reports([PilotReport(10**6, done), PilotReport(pilot_id, done)])
    assert isinstance(unknown, TaskQueueNotFound)
    assert isinstance(answer, CompleteAndRequestAnswer) and answer.result.accepted
    assert answer.task is not None and answer.task.task_id != task.task_id


def test_pilot_run_batch_reports_runs_a_workflow_and_says_how_many_requests(
    tmp_path: Path, tq_server: Callable[..., TqServer]
) -> None:
    server = tq_server("tq", args=["--architecture", "centralized"])
    workflow_id = server.operator().submit(_workflow()).workflow_id
    done = run_cli(
        *("pilot", "run", "--tq", server.url, "--token", PILOT, "--site", "T0"),
        *("--workdir", str(tmp_path / "w"), "--min-free-mb", "1", "--max-idle", "2"),
        *("--poll", "0.2", "--pilots", "3", "--batch-reports"),
        env=operator_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"3 pilots ran {TRIVIAL + 2} task(s); 0 failed" in done.stderr
    said = re.search(r"(\d+) reports in (\d+) request\(s\)", done.stderr)
    assert said is not None, done.stderr
    requests = _counters(server, workflow_id)["requests"]
    assert requests["reports"] == int(said.group(2))
    assert requests.get("complete-and-request", 0) == 0
