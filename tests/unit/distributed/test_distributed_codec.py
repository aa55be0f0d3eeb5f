"""What the master and its workers tell each other (Delgado Peris 2014 §III.B-C), declared once:
round trips through the DHT's wire format, strict decoding that names the field, and an older
master's assignment without resource requests."""

from __future__ import annotations

from typing import Any

import pytest

from glidein_ext.dht import wire
from glidein_ext.distributed import codec
from glidein_ext.tq.client.protocol import Completion, TaskAssignment


def _travel(value: object) -> object:
    return wire.decode(wire.encode(value))


TASK = TaskAssignment(
    40, 2, "w1-s1-0003", "sh -c 'x'", ("/store/a",), ("/store/b",), 600, 0, 4, 2000, 10
)


@pytest.mark.parametrize(
    "message",
    [
        codec.Hello(7, ("10.0.0.7", 4001), 40, 2),
        codec.Assign(5, TASK),
        codec.Done(7, Completion(40, 2, 0, ("/store/b",), "log", 10.0, 12.5, {"peer": 1})),
        codec.Bye(7),
        codec.End("the Task Queue no longer has this pilot"),
        codec.Resign(((8, ("10.0.0.8", 4008)), (13, ("10.0.0.13", 4013)))),
    ],
)
def test_every_kind_travels_and_comes_back_equal(message: Any) -> None:
    kind = codec.kind_of(message)
    assert codec.decode(kind, _travel(codec.encode(message))) == message


def test_a_long_report_travels_as_its_tail() -> None:
    long = codec.Done(7, Completion(41, 1, 1, (), "x" * 10_000))
    decoded = codec.decode(codec.DONE, _travel(codec.encode(long)))
    assert isinstance(decoded, codec.Done)
    assert decoded.completion.report == "x" * codec.REPORT_CHARS


def test_an_older_masters_assignment_asks_one_cpu() -> None:
    old = codec.encode(codec.Assign(5, TASK))[:8]  # before resource requests
    decoded = codec.decode(codec.ASSIGN, old)
    assert isinstance(decoded, codec.Assign)
    assert (decoded.task.request_cpus, decoded.task.request_memory, decoded.task.request_disk) == (
        1,
        0,
        0,
    )


@pytest.mark.parametrize(
    ("kind", "payload", "field"),
    [
        (codec.HELLO, [7, "h", 4001, 0], "hello"),
        (codec.HELLO, [7, "h", "4001", 0, 0], "hello.port"),
        (codec.ASSIGN, [5, 40, 2, "n", "c", "/store/a", [], 600], "assign.inputs"),
        (codec.ASSIGN, [5, 40, True, "n", "c", [], [], 600], "assign.attempt"),
        (codec.ASSIGN, [5, 40, 2, "n", "c", [], [], 600, 1, 0], "assign"),  # neither old nor new
        (codec.DONE, [7, 40, 2, 0, [], "r", None, None, []], "done.origins"),
        (codec.DONE, [7, 40, 2, 0, [], "r", "t", None, {}], "done.started_at"),
        (codec.DONE, [7, 40, 2, 0, [], "r", float("nan"), None, {}], "done.started_at"),
        (codec.DONE, None, "done"),
        (codec.BYE, [7, 8], "bye"),
        (codec.END, [3], "end.reason"),
        (codec.RESIGN, None, "resign"),
        (codec.RESIGN, [[8, "h"]], "resign"),
        (codec.RESIGN, [[8, "h", "4008"]], "resign"),
        ("gossip", [], "gossip"),
    ],
)
def test_malformed_messages_are_refused_naming_the_field(
    kind: str, payload: object, field: str
) -> None:
    with pytest.raises(ValueError, match=field):
        codec.decode(kind, payload)


def test_a_sealed_message_opens_only_under_its_key_and_kind() -> None:
    key, other = b"k" * 32, b"o" * 32
    payload = codec.seal_message(key, codec.Bye(7), 7, 3, 1000.0)
    envelope = codec.unseal(payload, codec.BYE)
    assert (envelope.pilot_id, envelope.epoch, envelope.stamp) == (7, 3, 1000.0)
    assert codec.authentic(key, codec.BYE, envelope)
    assert not codec.authentic(other, codec.BYE, envelope)
    assert not codec.authentic(key, codec.HELLO, envelope)
    answer = codec.seal_answer(key, codec.BYE, envelope.nonce, True)
    assert codec.open_answer(key, codec.BYE, envelope.nonce, answer) is True
    with pytest.raises(ValueError):
        codec.open_answer(other, codec.BYE, envelope.nonce, answer)
