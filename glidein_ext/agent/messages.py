"""What the master and its workers tell each other over the site DHT (MESSAGE), pure.

- ``hello``, worker to master: ``[pilot, host, port, task, attempt]`` (task 0: idle); answer
  ``[epoch]``, None when the addressee is not the master;
- ``assign``, master to worker: ``[epoch, task, attempt, name, command, inputs, outputs,
  max_runtime]``; answer True, or False (busy with another task, or a stale epoch);
- ``done``, worker to master: ``[pilot, task, attempt, exit code, outputs, report, started,
  ended, origins]``; answer True (the master holds it), ``"synced"`` (the Task Queue has it: the
  worker may forget it; until then it resends it to whoever is master), None when the addressee
  is not the master;
- ``bye``, worker to master: ``[pilot]``; answer True, None when not the master;
- ``end``, master to worker: ``[reason]``: the Task Queue no longer has the pilot (its credential
  was revoked, or it was found dead): it leaves (its task is requeued already); answer True;
- ``resign``, a leaving master to its successors: ``[[pilot, host, port], ...]``, the succession
  list (a worker that joined after the last TaskList learns its turn here); answer True.

Each of them travels sealed (beyond Delgado Peris 2014, where every pilot holds the one site key
and so could speak for any other): ``[pilot, epoch, nonce, time, body, mac]``, the MAC an
HMAC-SHA256 under the key that only that pilot and the master of that epoch hold
(``tq.client.pilotkeys``), over the message's kind and every other field; ``pilot`` is the worker
(the sender of hello, done and bye, the addressee of assign and end).  The receiver checks the MAC
and refuses a nonce it has seen or a time outside its window (``dht.replay``): a forged, replayed
or cross-pilot message changes nothing.  The answer is sealed too, ``[value, mac]`` over the
request's nonce, so that only the real master can tell a worker that the Task Queue has its
completion.  A master without the sender's key yet answers ``"pending"`` (unsealed: it says
nothing) and checks the message once the Task Queue gave it the key.

The TaskList and the ranked replies travel as a broadcast (``sched.tasklist``).  Decoding is
strict: anything malformed raises ValueError (the receiver answers None or False and logs it).

Python 3.9, standard library only.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from glidein_ext.dht import wire
from glidein_ext.errors import DhtError
from glidein_ext.tq.client.protocol import Completion, TaskAssignment

HELLO, ASSIGN, DONE, BYE, END = "hello", "assign", "done", "bye", "end"
RESIGN = "resign"  # a leaving master to its successors: the role is free, claim it now
DONE_SYNCED = "synced"  # the answer to a ``done`` the Task Queue has
PENDING = "pending"  # the master has not the sender's key yet: checked after its next sync
NONCE_BYTES = 12
MAC_BYTES = 16
REPORT_CHARS = 4000  # of a completion's report on the wire (a datagram holds it easily)


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what}: expected an integer")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what}: expected a string")
    return value


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValueError(f"{what}: expected a list")
    return tuple(_str(item, what) for item in value)


def _number(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what}: expected a number")
    return float(value)


ASSIGN_OLD, ASSIGN_FIELDS = 8, 11  # an assignment's fields before and since resource requests


def _fields(payload: Any, count: int, what: str) -> list[Any]:
    if not isinstance(payload, list) or len(payload) != count:
        raise ValueError(f"{what}: expected a list of {count}")
    return payload


@dataclass(frozen=True)
class Hello:
    pilot_id: int
    address: tuple[str, int]
    task_id: int = 0  # 0: idle
    attempt: int = 0


def encode_hello(hello: Hello) -> list[Any]:
    host, port = hello.address
    return [hello.pilot_id, host, port, hello.task_id, hello.attempt]


def decode_hello(payload: Any) -> Hello:
    pilot, host, port, task, attempt = _fields(payload, 5, "hello")
    return Hello(
        _int(pilot, "pilot"),
        (_str(host, "host"), _int(port, "port")),
        _int(task, "task"),
        _int(attempt, "attempt"),
    )


def encode_resign(successors: Sequence[tuple[int, tuple[str, int]]]) -> list[Any]:
    return [[pilot, host, port] for pilot, (host, port) in successors]


def decode_resign(payload: Any) -> tuple[tuple[int, tuple[str, int]], ...]:
    if not isinstance(payload, list) or len(payload) > 64:
        raise ValueError("resign: expected a list of successors")
    successors = []
    for item in payload:
        pilot, host, port = _fields(item, 3, "resign")
        successors.append((_int(pilot, "pilot"), (_str(host, "host"), _int(port, "port"))))
    return tuple(successors)


def encode_assign(epoch: int, task: TaskAssignment) -> list[Any]:
    return [
        epoch,
        task.task_id,
        task.attempt,
        task.name,
        task.command,
        list(task.inputs),
        list(task.outputs),
        task.max_runtime,
        task.request_cpus,
        task.request_memory,
        task.request_disk,
    ]


def decode_assign(payload: Any) -> tuple[int, TaskAssignment]:
    """(the master's epoch, the task).  The resource requests (the last three fields) may be
    missing in an assignment from an older master: then 1 CPU, memory and disk unspecified."""
    if isinstance(payload, list) and len(payload) == ASSIGN_OLD:
        payload = [*payload, 1, 0, 0]
    fields = _fields(payload, ASSIGN_FIELDS, "assign")
    epoch, task, attempt, name, command, inputs, outputs, runtime, cpus, memory, disk = fields
    return _int(epoch, "epoch"), TaskAssignment(
        task_id=_int(task, "task"),
        attempt=_int(attempt, "attempt"),
        name=_str(name, "name"),
        command=_str(command, "command"),
        inputs=_strings(inputs, "inputs"),
        outputs=_strings(outputs, "outputs"),
        max_runtime=_int(runtime, "max_runtime"),
        cached_inputs=0,
        request_cpus=_int(cpus, "request_cpus"),
        request_memory=_int(memory, "request_memory"),
        request_disk=_int(disk, "request_disk"),
    )


def encode_done(pilot_id: int, done: Completion) -> list[Any]:
    return [
        pilot_id,
        done.task_id,
        done.attempt,
        done.exit_code,
        list(done.outputs),
        done.report[-REPORT_CHARS:],
        done.started_at,
        done.ended_at,
        dict(done.origins),
    ]


def decode_done(payload: Any) -> tuple[int, Completion]:
    """(the reporting pilot, its completion)."""
    items = _fields(payload, 9, "done")
    pilot, task, attempt, code, outputs, report, started, ended, origins = items
    if not isinstance(origins, Mapping):
        raise ValueError("done: origins is not a map")
    counted = {_str(k, "origin"): _int(v, "origin count") for k, v in origins.items()}
    return _int(pilot, "pilot"), Completion(
        task_id=_int(task, "task"),
        attempt=_int(attempt, "attempt"),
        exit_code=_int(code, "exit code"),
        outputs=_strings(outputs, "outputs"),
        report=_str(report, "report"),
        started_at=_number(started, "started"),
        ended_at=_number(ended, "ended"),
        origins=counted,
    )


# --- sealing -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Envelope:
    """A sealed message as it came: not yet checked (:func:`authentic`)."""

    pilot_id: int  # the worker: sender of hello/done/bye, addressee of assign/end
    epoch: int  # the master's epoch the key belongs to
    nonce: bytes
    stamp: float  # the sender's clock (seconds since the epoch)
    body: Any
    mac: bytes


def _mac(key: bytes, kind: str, fields: list[Any]) -> bytes:
    try:
        data = wire.encode([kind, *fields])
    except DhtError as exc:  # a body that came off the wire always encodes again
        raise ValueError(f"{kind}: cannot be sealed: {exc}") from exc
    return hmac.new(key, data, hashlib.sha256).digest()[:MAC_BYTES]


def seal(key: bytes, kind: str, pilot_id: int, epoch: int, body: Any, now: float) -> list[Any]:
    """``body`` of ``kind`` sealed under ``key`` (a fresh nonce each time: resend by sealing
    again)."""
    nonce = os.urandom(NONCE_BYTES)
    fields = [pilot_id, epoch, nonce, float(now), body]
    return [*fields, _mac(key, kind, fields)]


def unseal(payload: Any, kind: str) -> Envelope:
    """The envelope's fields, strictly (ValueError if malformed); the MAC is not checked."""
    pilot, epoch, nonce, stamp, body, mac = _fields(payload, 6, kind)
    if not isinstance(nonce, bytes) or len(nonce) != NONCE_BYTES:
        raise ValueError(f"{kind}: bad nonce")
    if not isinstance(mac, bytes) or len(mac) != MAC_BYTES:
        raise ValueError(f"{kind}: bad mac")
    when = _number(stamp, "time")
    return Envelope(_int(pilot, "pilot"), _int(epoch, "epoch"), nonce, when or 0.0, body, mac)


def authentic(key: bytes, kind: str, envelope: Envelope) -> bool:
    """Whether the envelope was sealed under ``key`` as a ``kind`` message."""
    fields = [envelope.pilot_id, envelope.epoch, envelope.nonce, envelope.stamp, envelope.body]
    try:
        expected = _mac(key, kind, fields)
    except ValueError:
        return False
    return hmac.compare_digest(expected, envelope.mac)


def seal_answer(key: bytes, kind: str, nonce: bytes, value: Any) -> list[Any]:
    """The answer to the sealed request with ``nonce``."""
    return [value, _mac(key, "answer:" + kind, [nonce, value])]


def open_answer(key: bytes, kind: str, nonce: bytes, answer: Any) -> Any:
    """The value of a sealed answer to our request with ``nonce``; ValueError if it is not one
    (anyone could have sent it)."""
    value, mac = _fields(answer, 2, "answer")
    if not isinstance(mac, bytes) or not hmac.compare_digest(
        _mac(key, "answer:" + kind, [nonce, value]), mac
    ):
        raise ValueError(f"the answer to {kind} is not sealed by its addressee")
    return value
