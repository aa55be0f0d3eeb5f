"""The client's endpoint set (Lee 2003: equal instances, failover), pure, with a fake clock; and
the client's failover and throttle driven over fake transports."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from glidein_ext.backoff import Backoff
from glidein_ext.errors import TaskQueueError, TaskQueueNotFound, UsageError
from glidein_ext.tq.client import client as client_module
from glidein_ext.tq.client.client import TqClient, _Unavailable
from glidein_ext.tq.client.endpoints import EndpointSet, parse_endpoints

A, B, C = "http://a:1", "http://b:2", "http://c:3"


def test_parse_endpoints_takes_repeats_and_commas() -> None:
    assert parse_endpoints("http://a:1/, http://b:2") == [A, B]
    assert parse_endpoints([f"{A},{B}", C, A]) == [A, B, C]
    with pytest.raises(UsageError):
        parse_endpoints("ftp://a")
    with pytest.raises(UsageError):
        parse_endpoints(" , ")


def test_round_robin_from_a_random_start_spreads_the_load() -> None:
    firsts = Counter(EndpointSet([A, B, C], rng=random.Random(s)).order(0.0)[0] for s in range(60))
    assert set(firsts) == {A, B, C} and min(firsts.values()) > 5
    endpoints = EndpointSet([A, B, C], rng=random.Random(1))
    seen = [endpoints.order(0.0)[0] for _ in range(6)]
    assert Counter(seen) == {A: 2, B: 2, C: 2}


def test_a_failed_endpoint_goes_last_until_its_backoff_ends() -> None:
    endpoints = EndpointSet([A, B, C], backoff=Backoff(base=1.0, jitter=0.0))
    delay = endpoints.failed(B, now=10.0)
    assert delay == 1.0
    for _ in range(3):
        assert endpoints.order(10.5)[-1] == B
    assert endpoints.healthy(10.5) == [A, C]
    assert endpoints.healthy(11.0) == [A, B, C]
    endpoints.succeeded(B)
    endpoints.failed(A, 20.0)
    endpoints.failed(A, 20.0)  # A rests 2 s, B 1 s: B comes back first
    endpoints.failed(B, 20.0)
    assert endpoints.order(20.1) == [C, B, A]
    endpoints.succeeded(A)
    assert A in endpoints.healthy(20.1)


class FakeTransport:
    """Stands in for the HTTP exchange: per URL, an answer or an error."""

    def __init__(self, behaviour: dict[str, Any]) -> None:
        self.behaviour = behaviour
        self.calls: list[str] = []

    def __call__(
        self, base: str, method: str, path: str, data: Any, timeout: float, abortable: bool = False
    ) -> Any:
        self.calls.append(base)
        what = self.behaviour[base]
        if isinstance(what, BaseException):
            raise what
        return what


def client_over(transport: FakeTransport, urls: list[str], **kwargs: Any) -> TqClient:
    client = TqClient(urls, "token", rng=random.Random(0), **kwargs)
    client._call_one = transport  # type: ignore[method-assign]
    return client


def test_the_client_fails_over_and_remembers() -> None:
    down = _Unavailable(TaskQueueError("cannot reach the Task Queue at http://a:1"))
    transport = FakeTransport({A: down, B: {"ok": 1}})
    now = [0.0]
    client = client_over(transport, [A, B], clock=lambda: now[0], sleep=lambda s: None)
    for _ in range(4):
        assert client.call("GET", "/x") == {"ok": 1}
    assert transport.calls.count(A) == 1  # tried once, then backed off behind B
    assert client.url == B


def test_the_client_raises_the_last_error_when_all_fail() -> None:
    errors = {u: _Unavailable(TaskQueueError(f"{u} down")) for u in (A, B)}
    client = client_over(FakeTransport(dict(errors)), [A, B], sleep=lambda s: None)
    with pytest.raises(TaskQueueError, match="down"):
        client.call("GET", "/x")


def test_the_callers_errors_are_not_failed_over() -> None:
    transport = FakeTransport({A: TaskQueueNotFound("no such pilot"), B: {"ok": 1}})
    client = client_over(transport, [A, B])
    with pytest.raises(TaskQueueNotFound):
        for _ in range(2):  # whichever the round-robin starts with, A is reached
            client.call("GET", "/x")
    assert transport.calls.count(A) == 1


def test_the_client_throttles_an_instance_that_keeps_failing() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    transport = FakeTransport({A: _Unavailable(TaskQueueError("HTTP 503"))})
    client = client_over(transport, [A], clock=lambda: now[0], sleep=sleep)
    for _ in range(6):
        with pytest.raises(TaskQueueError):
            client.call("GET", "/x")
    assert slept == sorted(slept) and len(slept) == 5  # the first call did not wait
    assert slept[-1] == pytest.approx(2 * slept[-2])  # each failure halves the rate
    assert client.throttles[A].throttled


def test_a_bad_url_is_a_task_queue_error() -> None:
    with pytest.raises(TaskQueueError, match="http"):
        TqClient("ftp://x", "t")
    assert client_module.TqClient([A, B], "t").urls == [A, B]


def test_a_submit_is_not_repeated_elsewhere_once_it_may_have_been_done() -> None:
    """A workflow submitted twice would run twice: after a cut answer it is not failed over; a
    refused connection or a 5xx (nothing done) is."""
    cut = _Unavailable(TaskQueueError("connection reset"))
    transport = FakeTransport({A: cut, B: {"workflow_id": 1, "tasks": 1}})
    client = client_over(transport, [A, B])
    client.endpoints._cursor = 0  # A first
    with pytest.raises(TaskQueueError, match="reset"):
        client.call("POST", "/w", {}, repeatable=False)
    assert transport.calls == [A]
    transport.behaviour[A] = _Unavailable(TaskQueueError("refused"), undone=True)
    client.endpoints.succeeded(A)
    client.endpoints._cursor = 0
    assert client.call("POST", "/w", {}, repeatable=False) == {"workflow_id": 1, "tasks": 1}
    assert transport.calls == [A, A, B]


@pytest.mark.parametrize(
    "url", ["http://tq:8765/api", "https://tq:8765/api/v1/", "http://tq:8765?x=1", "http://tq#a"]
)
def test_a_url_with_a_path_is_refused_naming_the_one_to_give(url: str) -> None:
    with pytest.raises(UsageError, match=r"without a path, got .*\(give https?://tq(:8765)?\)"):
        parse_endpoints(url)
