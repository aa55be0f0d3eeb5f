"""A pilot speaks only for itself to its master (beyond Delgado Peris 2014, where every pilot holds
the site key): hello, done and bye are sealed with the sender's key for the master's epoch
(``tq.client.pilotkeys``); a message sealed by another pilot, replayed, or for another epoch
changes nothing in the master's book, and a pilot whose key has not come yet is heard once the
Task Queue gives it."""

from __future__ import annotations

import time
from typing import Any

import pytest

from glidein_ext.distributed import codec as messages
from glidein_ext.distributed.master import MasterRole
from glidein_ext.tq.client import pilotkeys
from glidein_ext.tq.client.protocol import Completion, PilotKey, SitePilot
from tests.support.masters import RecordingNode, installed_master

SITE = "T2_XX_Test"
SECRET = b"\x01" * 32
EPOCH = 4


def key(pilot: int, epoch: int = EPOCH) -> bytes:
    return pilotkeys.epoch_key(pilotkeys.pilot_key(SECRET, SITE, pilot), epoch)


def _master() -> tuple[MasterRole, RecordingNode]:
    busy = [SitePilot(p, f"127.0.0.1:40{p:02d}", 100 + p, 1, key(p).hex()) for p in (5, 6, 7)]
    return installed_master(SITE, EPOCH, busy)


def _states(role: MasterRole) -> dict[int, Any]:
    return {p: w.task for p, w in role.core.book.workers.items()}


def test_keys_differ_by_pilot_and_epoch() -> None:
    assert len({key(5), key(6), key(5, EPOCH + 1)}) == 3
    other_site = pilotkeys.pilot_key(SECRET, "T2_YY", 5)
    assert other_site != pilotkeys.pilot_key(SECRET, SITE, 5)


def test_a_pilot_cannot_report_done_bye_or_hello_for_another() -> None:
    role, node = _master()
    before = _states(role)
    # pilot 7 holds its own key only: it seals messages that name pilots 5 and 6
    for victim in (5, 6):
        done = messages.encode(messages.Done(victim, Completion(100 + victim, 1, 0)))
        as_itself = messages.seal(key(7), messages.DONE, 7, EPOCH, done, time.time())
        assert node.handlers[messages.DONE](as_itself, 7, None) is None  # names another pilot
        as_victim = messages.seal(key(7), messages.DONE, victim, EPOCH, done, time.time())
        assert node.handlers[messages.DONE](as_victim, 7, None) is None  # not the victim's key
        bye = messages.seal(key(7), messages.BYE, victim, EPOCH, [victim], time.time())
        assert node.handlers[messages.BYE](bye, 7, None) is None
        hello = messages.encode(messages.Hello(victim, ("10.0.0.9", 9)))
        sealed = messages.seal(key(7), messages.HELLO, victim, EPOCH, hello, time.time())
        assert node.handlers[messages.HELLO](sealed, 7, None) is None
    # and unsealed, as the old protocol sent them
    plain = messages.encode(messages.Done(5, Completion(105, 1, 0)))
    assert node.handlers[messages.DONE](plain, 7, None) is None
    assert node.handlers[messages.BYE]([6], 7, None) is None
    assert _states(role) == before
    assert role.core.book.take_report(1.0).completions == ()  # nothing for the Task Queue
    assert role.core.book.workers[5].address == ("127.0.0.1", 4005)


def test_a_replayed_or_stale_message_is_refused() -> None:
    role, node = _master()
    done = messages.encode(messages.Done(5, Completion(105, 1, 0)))
    payload = messages.seal(key(5), messages.DONE, 5, EPOCH, done, time.time())
    assert node.handlers[messages.DONE](payload, 5, None) is not None  # the real one
    role.core.book.take_report(1.0)
    role.core.book.reported()
    assert node.handlers[messages.DONE](payload, 5, None) is None  # the same datagram again
    bye = messages.seal(key(6), messages.BYE, 6, EPOCH, [6], time.time() - 3600)
    assert node.handlers[messages.BYE](bye, 6, None) is None  # an hour old
    assert 6 in role.core.book.workers
    old_epoch = messages.seal(key(6, EPOCH - 1), messages.BYE, 6, EPOCH - 1, [6], time.time())
    assert node.handlers[messages.BYE](old_epoch, 6, None) is None  # sealed for another master
    assert 6 in role.core.book.workers


@pytest.mark.parametrize("kind", [messages.HELLO, messages.DONE, messages.BYE])
def test_a_pilot_without_a_key_yet_is_heard_once_the_task_queue_gives_it(kind: str) -> None:
    role, node = _master()
    bodies = {
        messages.HELLO: messages.encode(messages.Hello(9, ("127.0.0.1", 4009))),
        messages.DONE: messages.encode(messages.Done(9, Completion(109, 1, 0))),
        messages.BYE: [9],
    }
    if kind == messages.BYE:
        role.core.book.join(9, ("127.0.0.1", 4009), 0.0)
    payload = messages.seal(key(9), kind, 9, EPOCH, bodies[kind], time.time())
    assert node.handlers[kind](payload, 9, None) == messages.PENDING
    forged = messages.seal(key(7), kind, 9, EPOCH, bodies[kind], time.time())
    assert node.handlers[kind](forged, 7, None) == messages.PENDING  # held too, checked later
    assert role.core.asked(0.0) == (9,)
    role.core.learn([PilotKey(9, key(9).hex())], [], time.time(), [])
    if kind == messages.HELLO:
        assert role.core.book.workers[9].address == ("127.0.0.1", 4009)
    elif kind == messages.DONE:
        assert [c.task_id for _, c in role.core.book.take_report(1.0).completions] == [109]
    else:
        assert 9 not in role.core.book.workers
    assert role.core.held == {}


def test_an_unknown_pilot_asked_about_and_gone_is_dropped() -> None:
    role, node = _master()
    payload = messages.seal(key(7), messages.BYE, 99, EPOCH, [99], time.time())
    assert node.handlers[messages.BYE](payload, 7, None) == messages.PENDING
    role.core.learn([], [99], time.time(), [])
    assert role.core.held == {} and 99 not in role.core.keys
