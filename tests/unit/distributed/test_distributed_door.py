"""The one door of every site message: the same checks, in the same order, for every kind, each
refusal with its reason; a master that lost the role is not obeyed, whatever key it still holds."""

from __future__ import annotations

from typing import Any

import pytest

from glidein_ext.distributed import codec
from glidein_ext.distributed.door import Admitted, Door, Pending, Refused, Role
from glidein_ext.tq.client import pilotkeys
from glidein_ext.tq.client.protocol import Completion

KEY = bytes(range(32))  # pilot 7's registration key
NOW = 1_000_000.0


def _to_worker(message: Any, epoch: int, pilot: int = 7, key: bytes = KEY, at: float = NOW) -> Any:
    return codec.seal_message(pilotkeys.epoch_key(key, epoch), message, pilot, epoch, at)


def _worker(epoch: int = 0) -> Door:
    door = Door(Role.WORKER, 7, key=KEY)
    door.know_epoch(epoch)
    return door


def test_a_worker_obeys_the_master_of_its_epoch_and_a_newer_one() -> None:
    door = _worker(epoch=2)
    end = door.admit(codec.END, _to_worker(codec.End("bye"), 2), NOW)
    assert isinstance(end, Admitted)
    assert (end.epoch, end.message) == (2, codec.End("bye"))
    newer = door.admit(codec.RESIGN, _to_worker(codec.Resign(()), 3), NOW)
    assert isinstance(newer, Admitted)


def test_a_stale_master_s_end_is_refused_though_its_seal_is_good() -> None:
    """The master of epoch 1 kept its workers' epoch-1 keys; after a takeover (epoch 2) its
    sealed ``end`` stops no one."""
    door = _worker(epoch=1)
    assert isinstance(door.admit(codec.END, _to_worker(codec.End("x"), 1), NOW), Admitted)
    door.know_epoch(2)  # a TaskList of the new master, or this pilot became it
    for kind, message in (
        (codec.END, codec.End("the Task Queue no longer has this pilot")),
        (codec.ASSIGN, codec.Assign(1, _task())),
        (codec.RESIGN, codec.Resign(())),
    ):
        refused = door.admit(kind, _to_worker(message, 1), NOW)
        assert isinstance(refused, Refused), kind
        assert "epoch 1" in refused.reason and "epoch 2" in refused.reason
    door.know_epoch(1)  # knowing an older epoch again lowers nothing
    assert isinstance(door.admit(codec.END, _to_worker(codec.End("x"), 1), NOW), Refused)


def _task() -> Any:
    from glidein_ext.tq.client.protocol import TaskAssignment

    return TaskAssignment(40, 1, "t", "true", (), (), 60, 0)


@pytest.mark.parametrize(
    ("kind", "payload", "reason"),
    [
        (codec.END, lambda: _to_worker(codec.End("x"), 2, pilot=8), "addressed to pilot 8"),
        (codec.END, lambda: _to_worker(codec.End("x"), 2, key=b"k" * 32), "not sealed"),
        (codec.END, lambda: _to_worker(codec.End("x"), 2, at=NOW - 3600), "stale"),
        (codec.ASSIGN, lambda: _to_worker(codec.Assign(3, _task()), 2), "names epoch 3"),
        (codec.END, lambda: [7, 2, b"n" * 12, NOW, ["x"]], "malformed"),
        # the MAC covers the kind: a body sealed as a resign is no end
        (codec.END, lambda: _to_worker(codec.Resign(()), 2), "not sealed"),
    ],
)
def test_each_refusal_says_why(kind: str, payload: Any, reason: str) -> None:
    decision = _worker(epoch=2).admit(kind, payload(), NOW)
    assert isinstance(decision, Refused)
    assert reason in decision.reason


def test_a_replayed_message_is_refused_the_second_time() -> None:
    door = _worker(epoch=2)
    payload = _to_worker(codec.End("x"), 2)
    assert isinstance(door.admit(codec.END, payload, NOW), Admitted)
    again = door.admit(codec.END, payload, NOW + 1)
    assert isinstance(again, Refused) and again.reason == "replayed"


def test_each_role_takes_only_its_kinds() -> None:
    worker, master = _worker(), Door(Role.MASTER, 1, epoch=2)
    for kind in codec.TO_MASTER:
        refused = worker.admit(kind, [], NOW)
        assert isinstance(refused, Refused) and "a worker takes no" in refused.reason
    for kind in codec.TO_WORKER:
        refused = master.admit(kind, [], NOW)
        assert isinstance(refused, Refused) and "a master takes no" in refused.reason


def _to_master(message: Any, pilot: int, epoch: int = 2, key: bytes = KEY) -> Any:
    return codec.seal_message(key, message, pilot, epoch, NOW)


def test_a_master_holds_a_message_until_the_senders_key_comes() -> None:
    door = Door(Role.MASTER, 1, epoch=2)
    done = codec.Done(7, Completion(40, 1, 0))
    pending = door.admit(codec.DONE, _to_master(done, 7), NOW)
    assert isinstance(pending, Pending)
    assert door.held(pending, NOW) is pending  # still no key
    door.learn_key(7, KEY)
    admitted = door.held(pending, NOW + 1)
    assert isinstance(admitted, Admitted) and admitted.message == done
    answer = admitted.answer(codec.DONE_SYNCED)
    assert codec.open_answer(KEY, codec.DONE, admitted.nonce, answer) == codec.DONE_SYNCED


def test_a_master_refuses_another_epoch_quietly_and_a_pilot_speaking_for_another() -> None:
    door = Door(Role.MASTER, 1, epoch=2, keys={7: KEY})
    other = door.admit(codec.BYE, _to_master(codec.Bye(7), 7, epoch=1), NOW)
    assert isinstance(other, Refused) and other.quiet
    forged = door.admit(codec.DONE, _to_master(codec.Done(9, Completion(41, 1, 0)), 7), NOW)
    assert isinstance(forged, Refused) and not forged.quiet
    assert "names pilot 9" in forged.reason
    hello = door.admit(codec.HELLO, _to_master(codec.Hello(7, ("h", 9)), 7), NOW)
    assert isinstance(hello, Admitted) and hello.pilot_id == 7
