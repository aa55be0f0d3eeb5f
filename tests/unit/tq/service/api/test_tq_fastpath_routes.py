"""The pilots' fast path (``tq.service.api.fastpath``) answers as FastAPI's routes do: the same
calls, well formed or not, sent to the application as built and to the same application without
the fast path, over two stores in the same state, get the same status and the same body."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glidein_ext.tq.service.api.fastpath import PilotFastPath, TaskQueueApp
from glidein_ext.tq.service.server import build_app, open_store
from glidein_ext.tq.service.settings import TqSettings
from glidein_ext.tq.workflow import generate

TOKENS = {"pilot": "Bearer pi", "operator": "Bearer op", "none": None, "bad": "Bearer nope"}
# random per store: the same key need not be the same text in both
RANDOM_KEYS = frozenset({"site_key", "pilot_key", "dht_id"})

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**65), 2**65) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)
registrations = st.fixed_dictionaries(
    {"site": st.sampled_from(["S", "", "T" * 300]), "host": st.sampled_from(["h", "h2"])},
    optional={
        "cpus": st.integers(1, 8) | st.integers(-1, 2**64),
        "ttl": st.one_of(st.none(), st.integers(-5, 10**6)),
        "requirements": st.sampled_from(["true", "false", "TARGET.x >", "RequestCpus <= 4"]),
        "cached": st.lists(st.sampled_from(["/store/a", "rel", ""]), max_size=2),
    },
)
requests = st.fixed_dictionaries(
    {}, optional={"cached": st.lists(st.sampled_from(["/store/a", 7]), max_size=2)}
)
completions = st.fixed_dictionaries(
    {
        "task_id": st.integers(1, 3),
        "attempt": st.integers(0, 2),
        "exit_code": st.integers(-2, 300),
    },
    optional={"report": st.text(max_size=10), "wall_time": st.floats(-1, 10)},
)
# two pilots first, so that the calls name pilots that exist
REGISTER = [("/api/v1/pilots", "pilot", {"site": "S", "host": host}, True) for host in ("h", "h2")]
# a busy pilot's one call per task: a completion and a request's cache list
combined = st.fixed_dictionaries(
    {"completion": completions | json_values},
    optional={"cached": st.lists(st.sampled_from(["/store/a", 7]), max_size=2)},
)
# several pilots' reports in one request: pilots that exist or not, bodies well formed or not
one_report = st.fixed_dictionaries(
    {
        "pilot_id": st.sampled_from([1, 2, 9, 0, 2**64]),
        "completion": completions | json_values,
    },
    optional={"cached": st.lists(st.sampled_from(["/store/a", 7]), max_size=2)},
)
reports = st.fixed_dictionaries({"reports": st.lists(one_report | json_values, max_size=3)})
bodies = {
    "": registrations,
    "request": requests,
    "complete": completions,
    "complete-and-request": combined,
    "reports": reports,
}


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, str, Any, bool]:
    """(path, token, body, whether the body is declared JSON)."""
    name = draw(st.sampled_from(["", "request", "complete", "complete-and-request", "reports"]))
    pilot = draw(st.sampled_from(["1", "1", "2", "2", "9", "0", "01", "x", str(2**64)]))
    if name == "reports":
        path = "/api/v1/pilots/reports"
    else:
        in_path = f"/{pilot}/{name}" if name else draw(st.sampled_from(["", "/"]))
        path = "/api/v1/pilots" + in_path
    body = draw(st.one_of(bodies[name], bodies[name], bodies[name], json_values))
    token = draw(st.sampled_from(["pilot", "pilot", "pilot", "operator", "none", "bad"]))
    return path, token, body, draw(st.sampled_from([True, True, True, False]))


def _same_shape(answer: Any) -> Any:
    if isinstance(answer, dict):
        return {
            key: ("<random>" if key in RANDOM_KEYS and value else _same_shape(value))
            for key, value in answer.items()
        }
    if isinstance(answer, list):
        return [_same_shape(item) for item in answer]
    return answer


def _without_fast_path(app: TaskQueueApp) -> TaskQueueApp:
    """The application as FastAPI's routes alone serve it."""
    app.fast_path = None
    return app


@contextmanager
def _clients() -> Iterator[tuple[TestClient, TestClient]]:
    """Two applications over two stores with the same workflow: the fast path's and the routes'."""
    with ExitStack() as stack:
        clients = []
        for fast in (True, False):
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            config = TqSettings(
                database=str(directory / "tq.sqlite"),
                operator_token="op",  # noqa: S106 (a test token)
                pilot_token="pi",  # noqa: S106
            )
            store = open_store(config)
            stack.callback(store.engine.dispose)
            app = build_app(store, config)
            client = stack.enter_context(TestClient(app if fast else _without_fast_path(app)))
            client.post(
                "/api/v1/workflows",
                json=generate("w1", scale=4 / 80),
                headers={"Authorization": "Bearer op"},
            ).raise_for_status()
            clients.append(client)
        yield clients[0], clients[1]


def _send(client: TestClient, call: tuple[str, str, Any, bool]) -> tuple[int, Any]:
    path, token, body, declared = call
    headers = {"content-type": "application/json" if declared else "text/plain"}
    bearer = TOKENS[token]
    if bearer is not None:
        headers["Authorization"] = bearer
    answer = client.post(path, content=json.dumps(body), headers=headers)
    try:
        shown: Any = answer.json()
    except ValueError:
        shown = answer.text
    return answer.status_code, _same_shape(shown)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(calls(), min_size=1, max_size=8))
def test_the_fast_path_answers_as_the_routes_do(
    sequence: list[tuple[str, str, Any, bool]],
) -> None:
    with _clients() as (fast, routes):
        for call in (*REGISTER, *sequence):
            assert _send(fast, call) == _send(routes, call), call


def test_the_fast_path_is_in_the_application_and_out_of_the_other() -> None:
    """What the property compares: the application as built has the fast path, the other not."""
    with _clients() as (fast, routes):
        assert isinstance(_app(fast).fast_path, PilotFastPath)
        assert _app(routes).fast_path is None


def test_the_calls_it_serves_are_counted_and_measured_as_the_routes_count_them() -> None:
    """The metrics (requests by kind and status) and the run's counters (pilot requests by kind)
    after the same calls, served and refused, are the same with the fast path and without."""
    sequence = [
        *REGISTER,
        ("/api/v1/pilots/1/request", "pilot", {}, True),
        ("/api/v1/pilots/2/request", "pilot", {"cached": ["/store/a"]}, True),
        ("/api/v1/pilots/1/request", "pilot", {"cached": [7]}, True),  # refused: 422
        ("/api/v1/pilots/2/request", "bad", {}, True),  # refused: 401
        ("/api/v1/pilots/9/request", "pilot", {}, True),  # no such pilot: 404
    ]
    with _clients() as (fast, routes):
        for client in (fast, routes):
            for call in sequence:
                _send(client, call)
            task = client.post(
                "/api/v1/pilots/1/request", json={}, headers={"Authorization": "Bearer pi"}
            ).json()["task"]
            done = {"task_id": task["task_id"], "attempt": task["attempt"], "exit_code": 0}
            for path, body in (
                ("1/complete", done),
                ("1/complete-and-request", {"completion": done}),
                ("reports", {"reports": [{"pilot_id": 1, "completion": done}]}),
                ("reports", {"reports": []}),  # refused: 422
            ):
                client.post(
                    f"/api/v1/pilots/{path}", json=body, headers={"Authorization": "Bearer pi"}
                )
        counted = [_requests(client) for client in (fast, routes)]
        assert counted[0] == counted[1]
        metrics, counters = counted[0]
        assert metrics[("request", "200")] == 3
        assert metrics[("request", "422")] == metrics[("request", "404")] == 1
        assert metrics[("complete", "200")] == metrics[("complete-and-request", "200")] == 1
        assert metrics[("reports", "200")] == metrics[("reports", "422")] == 1
        assert counters["register"] == 2
        assert counters["complete-and-request"] == 1
        assert counters["reports"] == 2  # a pilot's request, refused or not


def _requests(client: TestClient) -> tuple[dict[tuple[str, str], float], dict[str, float]]:
    """The requests counted by /metrics (by kind and status) and by the run's counters."""
    operator = {"Authorization": "Bearer op"}
    metrics: dict[tuple[str, str], float] = {}
    for line in client.get("/metrics", headers=operator).text.splitlines():
        if line.startswith("glidein_ext_tq_requests_total{"):
            labels, value = line[len("glidein_ext_tq_requests_total{") :].split("} ")
            found = dict(item.split("=") for item in labels.split(","))
            metrics[(found["kind"].strip('"'), found["status"].strip('"'))] = float(value)
    counters = client.get("/api/v1/counters", headers=operator).json()["overall"]["requests"]
    return metrics, counters


def _app(client: TestClient) -> TaskQueueApp:
    app = client.app
    assert isinstance(app, TaskQueueApp)
    return app
