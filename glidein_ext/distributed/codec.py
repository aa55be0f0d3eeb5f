"""What the master and its workers tell each other over the site DHT, declared once (Delgado
Peris 2014 §III.B-C; the DHT's MESSAGE), pure.

Each kind is a dataclass and a :class:`Codec` that names its fields in their order on the wire;
one field reader (``dht.fields``) checks every field of every kind, so decoding is strict the same
way everywhere: anything malformed raises ``ValueError`` naming the field.

=========  ================  =================================================================
kind       from -> to        fields (answer)
=========  ================  =================================================================
hello      worker -> master  pilot, host, port, task (0: idle), attempt (``[epoch]``)
assign     master -> worker  epoch, then the task: id, attempt, name, command, inputs, outputs,
                             max_runtime, request_cpus, request_memory, request_disk (True: taken;
                             False: busy with another task, or from a master it does not obey)
done       worker -> master  pilot, then the completion: task, attempt, exit code, outputs,
                             report (its tail), started, ended, origins (True: the master holds
                             it; ``"synced"``: the Task Queue has it, the worker may forget it)
bye        worker -> master  pilot (True)
end        master -> worker  reason: the Task Queue no longer has the pilot (True)
resign     master -> worker  the succession list: ``[[pilot, host, port], ...]`` (True)
=========  ================  =================================================================

A master-bound message is answered None when its addressee is not the master of the epoch it
was sealed for, and ``"pending"`` (unsealed: it says nothing) by a master that has not the
sender's key yet (it checks the message once the Task Queue gave it the key).

Each message travels sealed (beyond Delgado Peris 2014, where every pilot holds the one site key
and so could speak for any other): ``[pilot, epoch, nonce, time, body, mac]``, the MAC an
HMAC-SHA256 under the key that only that pilot and the master of that epoch hold
(``tq.client.pilotkeys``), over the message's kind and every other field; ``pilot`` is the worker
(the sender of hello, done and bye, the addressee of assign, end and resign).  Whether a message
is let in -- its seal, sender, role, epoch and freshness -- is decided in one place,
``distributed.door``.  The answer is sealed too, ``[value, mac]`` over the request's nonce, so
that only the real master can tell a worker that the Task Queue has its completion.

The TaskList and the ranked replies travel as a broadcast (``sched.tasklist``), read with the
same field reader.

Python 3.9, standard library only.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from glidein_ext.dht import fields, wire
from glidein_ext.errors import DhtError
from glidein_ext.tq.client.protocol import Completion, TaskAssignment

HELLO, ASSIGN, DONE, BYE, END = "hello", "assign", "done", "bye", "end"
RESIGN = "resign"  # a leaving master to its successors: the role is free, claim it now
TO_MASTER = frozenset({HELLO, DONE, BYE})  # sealed by a worker, for the master of an epoch
TO_WORKER = frozenset({ASSIGN, END, RESIGN})  # sealed by a master, for one worker
DONE_SYNCED = "synced"  # the answer to a ``done`` the Task Queue has
PENDING = "pending"  # the master has not the sender's key yet: checked after its next sync
NONCE_BYTES = 12
MAC_BYTES = 16
REPORT_CHARS = 4000  # of a completion's report on the wire (a datagram holds it easily)
MAX_SUCCESSORS = 64

Address = tuple[str, int]
M = TypeVar("M")


@dataclass(frozen=True)
class Field:
    """One field on the wire: its name, its reader, and whether an older peer leaves it out
    (``optional``, with the value it then has, ``missing``): the trailing optional fields come
    all together or not at all."""

    name: str
    read: Callable[[Any, str], Any]
    missing: Any = None
    optional: bool = False


class Codec(Generic[M]):
    """A message kind's fields in their wire order: ``encode`` takes them by name from the
    message (``flatten``), ``decode`` reads each with its reader and builds the message
    (``build``)."""

    def __init__(
        self,
        kind: str,
        declared: tuple[Field, ...],
        build: Callable[[dict[str, Any]], M],
        flatten: Callable[[M], dict[str, Any]],
    ) -> None:
        self.kind = kind
        self.fields = declared
        self._build = build
        self._flatten = flatten
        self._least = sum(1 for f in declared if not f.optional)

    def encode(self, message: M) -> list[Any]:
        values = self._flatten(message)
        return [values[f.name] for f in self.fields]

    def decode(self, payload: Any) -> M:
        got = fields.items(payload, self.kind)
        if len(got) not in (self._least, len(self.fields)):  # an older peer's: all or none
            raise fields.FieldError(f"{self.kind}: expected a list of {len(self.fields)}")
        values = {
            f.name: f.read(got[i], f"{self.kind}.{f.name}") if i < len(got) else f.missing
            for i, f in enumerate(self.fields)
        }
        return self._build(values)


# --- the messages --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hello:
    """A worker joins, or meets a new master, saying what it runs (task 0: idle)."""

    pilot_id: int
    address: Address
    task_id: int = 0
    attempt: int = 0


@dataclass(frozen=True)
class Assign:
    epoch: int
    task: TaskAssignment


@dataclass(frozen=True)
class Done:
    pilot_id: int
    completion: Completion


@dataclass(frozen=True)
class Bye:
    pilot_id: int


@dataclass(frozen=True)
class End:
    reason: str


@dataclass(frozen=True)
class Resign:
    successors: tuple[tuple[int, Address], ...]


def _successors(value: Any, what: str) -> tuple[tuple[int, Address], ...]:
    listed = fields.items(value, what)
    if len(listed) > MAX_SUCCESSORS:
        raise fields.FieldError(f"{what}: more than {MAX_SUCCESSORS} successors")
    out = []
    for item in listed:
        pilot, host, port = fields.items(item, what, 3)
        out.append(
            (fields.integer(pilot, what), (fields.text(host, what), fields.integer(port, what)))
        )
    return tuple(out)


def _task_fields(task: TaskAssignment) -> dict[str, Any]:
    return {f.name: _wire_value(getattr(task, f.name)) for f in _TASK}


def _wire_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


_TASK = (
    Field("task_id", fields.integer),
    Field("attempt", fields.integer),
    Field("name", fields.text),
    Field("command", fields.text),
    Field("inputs", fields.texts),
    Field("outputs", fields.texts),
    Field("max_runtime", fields.integer),
    # An older master sends no resource requests: 1 CPU, memory and disk unspecified.
    Field("request_cpus", fields.integer, missing=1, optional=True),
    Field("request_memory", fields.integer, missing=0, optional=True),
    Field("request_disk", fields.integer, missing=0, optional=True),
)
_COMPLETION = (
    Field("task_id", fields.integer),
    Field("attempt", fields.integer),
    Field("exit_code", fields.integer),
    Field("outputs", fields.texts),
    Field("report", fields.text),
    Field("started_at", fields.optional_number),
    Field("ended_at", fields.optional_number),
    Field("origins", fields.counts),
)


def _completion_fields(done: Done) -> dict[str, Any]:
    c = done.completion
    values = {f.name: _wire_value(getattr(c, f.name)) for f in _COMPLETION}
    values["report"] = c.report[-REPORT_CHARS:]
    values["origins"] = dict(c.origins)
    return {"pilot_id": done.pilot_id, **values}


def _done(values: dict[str, Any]) -> Done:
    pilot = values.pop("pilot_id")
    return Done(pilot, Completion(**values))


def _assign(values: dict[str, Any]) -> Assign:
    epoch = values.pop("epoch")
    return Assign(epoch, TaskAssignment(cached_inputs=0, **values))


HELLO_CODEC: Codec[Hello] = Codec(
    HELLO,
    (
        Field("pilot_id", fields.integer),
        Field("host", fields.text),
        Field("port", fields.integer),
        Field("task_id", fields.integer),
        Field("attempt", fields.integer),
    ),
    lambda v: Hello(v["pilot_id"], (v["host"], v["port"]), v["task_id"], v["attempt"]),
    lambda h: {
        "pilot_id": h.pilot_id,
        "host": h.address[0],
        "port": h.address[1],
        "task_id": h.task_id,
        "attempt": h.attempt,
    },
)
ASSIGN_CODEC: Codec[Assign] = Codec(
    ASSIGN,
    (Field("epoch", fields.integer), *_TASK),
    _assign,
    lambda a: {"epoch": a.epoch, **_task_fields(a.task)},
)
DONE_CODEC: Codec[Done] = Codec(
    DONE, (Field("pilot_id", fields.integer), *_COMPLETION), _done, _completion_fields
)
BYE_CODEC: Codec[Bye] = Codec(
    BYE, (Field("pilot_id", fields.integer),), lambda v: Bye(v["pilot_id"]), vars
)
END_CODEC: Codec[End] = Codec(
    END, (Field("reason", fields.text),), lambda v: End(v["reason"]), vars
)
CODECS: Mapping[str, Codec[Any]] = {
    c.kind: c for c in (HELLO_CODEC, ASSIGN_CODEC, DONE_CODEC, BYE_CODEC, END_CODEC)
}


def encode(message: Hello | Assign | Done | Bye | End | Resign) -> list[Any]:
    """A message's body on the wire."""
    if isinstance(message, Resign):
        return [[pilot, host, port] for pilot, (host, port) in message.successors]
    return CODECS[kind_of(message)].encode(message)


def decode(kind: str, body: Any) -> Hello | Assign | Done | Bye | End | Resign:
    """The message of ``kind`` in ``body``; ValueError naming the field if malformed."""
    if kind == RESIGN:
        return Resign(_successors(body, RESIGN))
    codec = CODECS.get(kind)
    if codec is None:
        raise fields.FieldError(f"unknown message {kind!r}")
    decoded: Hello | Assign | Done | Bye | End = codec.decode(body)
    return decoded


_KINDS: Mapping[type, str] = {
    Hello: HELLO,
    Assign: ASSIGN,
    Done: DONE,
    Bye: BYE,
    End: END,
    Resign: RESIGN,
}


def kind_of(message: object) -> str:
    return _KINDS[type(message)]


# --- sealing -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Envelope:
    """A sealed message as it came: not yet checked (``distributed.door`` checks it)."""

    pilot_id: int  # the worker: sender of hello/done/bye, addressee of assign/end/resign
    epoch: int  # the master's epoch the key belongs to
    nonce: bytes
    stamp: float  # the sender's clock (seconds since the epoch)
    body: Any
    mac: bytes


def _mac(key: bytes, kind: str, parts: list[Any]) -> bytes:
    try:
        data = wire.encode([kind, *parts])
    except DhtError as exc:  # a body that came off the wire always encodes again
        raise ValueError(f"{kind}: cannot be sealed: {exc}") from exc
    return hmac.new(key, data, hashlib.sha256).digest()[:MAC_BYTES]


def seal(key: bytes, kind: str, pilot_id: int, epoch: int, body: Any, now: float) -> list[Any]:
    """``body`` of ``kind`` sealed under ``key`` (a fresh nonce each time: resend by sealing
    again)."""
    nonce = os.urandom(NONCE_BYTES)
    parts = [pilot_id, epoch, nonce, float(now), body]
    return [*parts, _mac(key, kind, parts)]


def seal_message(
    key: bytes,
    message: Hello | Assign | Done | Bye | End | Resign,
    pilot_id: int,
    epoch: int,
    now: float,
) -> list[Any]:
    """A message sealed under ``key``."""
    return seal(key, kind_of(message), pilot_id, epoch, encode(message), now)


def unseal(payload: Any, kind: str) -> Envelope:
    """The envelope's fields, strictly (ValueError if malformed); the MAC is not checked."""
    pilot, epoch, nonce, stamp, body, mac = fields.items(payload, kind, 6)
    return Envelope(
        fields.integer(pilot, f"{kind}.pilot"),
        fields.integer(epoch, f"{kind}.epoch"),
        fields.blob(nonce, f"{kind}.nonce", NONCE_BYTES),
        fields.number(stamp, f"{kind}.time"),
        body,
        fields.blob(mac, f"{kind}.mac", MAC_BYTES),
    )


def authentic(key: bytes, kind: str, envelope: Envelope) -> bool:
    """Whether the envelope was sealed under ``key`` as a ``kind`` message."""
    parts = [envelope.pilot_id, envelope.epoch, envelope.nonce, envelope.stamp, envelope.body]
    try:
        expected = _mac(key, kind, parts)
    except ValueError:
        return False
    return hmac.compare_digest(expected, envelope.mac)


def seal_answer(key: bytes, kind: str, nonce: bytes, value: Any) -> list[Any]:
    """The answer to the sealed request with ``nonce``."""
    return [value, _mac(key, "answer:" + kind, [nonce, value])]


def open_answer(key: bytes, kind: str, nonce: bytes, answer: Any) -> Any:
    """The value of a sealed answer to our request with ``nonce``; ValueError if it is not one
    (anyone could have sent it)."""
    value, mac = fields.items(answer, "answer", 2)
    if not isinstance(mac, bytes) or not hmac.compare_digest(
        _mac(key, "answer:" + kind, [nonce, value]), mac
    ):
        raise ValueError(f"the answer to {kind} is not sealed by its addressee")
    return value
