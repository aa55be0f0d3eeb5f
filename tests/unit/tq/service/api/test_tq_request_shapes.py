"""The pilot's request bodies have one definition, the protocol's dataclasses
(``tq.client.protocol``): the service's request models are derived from them
(``schemas.request_model``: the fields, in order, with their defaults, each with its bound), and
what the client sends (``to_json`` of the dataclass) is what the model takes back into the same
dataclass (``schemas.message``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from glidein_ext.tq.client import protocol as p
from glidein_ext.tq.client.limits import MAX_OFFER_WAIT
from glidein_ext.tq.service.api import schemas as s

# request model -> (the protocol's dataclass, a message of it as a pilot sends it)
PILOT_REQUESTS: dict[str, tuple[type[BaseModel], Any]] = {
    "register": (s.RegisterRequest, p.Registration(site="S", host="wn1", cached=("/a",))),
    "request": (s.TaskRequest, p.TaskRequest(cached=("/a", "/b"), wait=5.0)),
    "heartbeat": (s.HeartbeatRequest, p.Heartbeat(cached=("/a",))),
    "complete": (s.CompleteRequest, p.Completion(3, 1, 0, ("/out",), "ok")),
    "complete-and-request": (
        s.CompleteAndRequestRequest,
        p.CompleteAndRequest(p.Completion(3, 1, 0, ("/out",), "ok", 1.0, 2.0, {"se": 1}), ("/a",)),
    ),
}


@pytest.mark.parametrize("call", sorted(PILOT_REQUESTS))
def test_each_pilot_request_model_is_derived_from_its_dataclass(call: str) -> None:
    model, sent = PILOT_REQUESTS[call]
    kind = type(sent)
    fields = dataclasses.fields(kind)
    assert list(model.model_fields) == [item.name for item in fields]
    for item in fields:
        if item.default is not dataclasses.MISSING:
            assert model.model_fields[item.name].default == item.default, item.name
    body = model.model_validate(p.to_json(sent))
    back = s.message(body, kind)
    assert p.to_json(back) == p.to_json(sent)


def test_the_task_request_and_heartbeat_keep_their_wire_names_and_defaults() -> None:
    assert p.to_json(p.TaskRequest(("/a",), 2.5)) == {"cached": ["/a"], "wait": 2.5}
    assert p.to_json(p.Heartbeat()) == {"cached": None}
    empty = s.message(s.TaskRequest.model_validate({}), p.TaskRequest)
    assert (empty.cached, empty.wait) == (None, 0.0)
    assert s.message(s.HeartbeatRequest.model_validate({}), p.Heartbeat).cached is None


@pytest.mark.parametrize(
    "body",
    [
        {"wait": -1},
        {"wait": MAX_OFFER_WAIT + 1},
        {"wait": None},
        {"wait": "x"},
        {"cached": "/a"},
        {"cached": [1]},
        {"cached": ["a\x00b"]},
        {"cached": ["x" * 5000]},
    ],
)
def test_the_task_request_keeps_its_bounds(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        s.TaskRequest.model_validate(body)
    if "cached" in body:
        with pytest.raises(ValidationError):
            s.HeartbeatRequest.model_validate(body)


def test_a_field_added_to_a_request_dataclass_without_a_bound_is_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class Wider(p.TaskRequest):
        priority: int = 0

    with pytest.raises(TypeError, match="no bound for \\['priority'\\]"):
        s.request_model("WiderRequest", Wider, {"cached": s.Cached, "wait": float})
