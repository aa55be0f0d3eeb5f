"""What the master and its workers tell each other over the site DHT (MESSAGE), pure.

- ``hello``, worker to master: ``[pilot, host, port, task, attempt]`` (task 0: idle); answer
  ``[epoch]``, None when the addressee is not the master;
- ``assign``, master to worker: ``[epoch, task, attempt, name, command, inputs, outputs,
  max_runtime]``; answer True, or False (busy with another task, or a stale epoch);
- ``done``, worker to master: ``[pilot, task, attempt, exit code, outputs, report, started,
  ended, origins]``; answer True (the master holds it), ``"synced"`` (the Task Queue has it: the
  worker may forget it; until then it resends it to whoever is master), None when the addressee
  is not the master;
- ``bye``, worker to master: ``[pilot]``; answer True, None when not the master.

The TaskList and the ranked replies travel as a broadcast (``sched.tasklist``).  Decoding is
strict: anything malformed raises ValueError (the receiver answers None or False and logs it).

Python 3.9, standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from glidein_ext.tq.client.protocol import Assignment, Completion

HELLO, ASSIGN, DONE, BYE = "hello", "assign", "done", "bye"
DONE_SYNCED = "synced"  # the answer to a ``done`` the Task Queue has
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


def encode_assign(epoch: int, task: Assignment) -> list[Any]:
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


def decode_assign(payload: Any) -> tuple[int, Assignment]:
    """(the master's epoch, the task).  The resource requests (the last three fields) may be
    missing in an assignment from an older master: then 1 CPU, memory and disk unspecified."""
    if isinstance(payload, list) and len(payload) == ASSIGN_OLD:
        payload = [*payload, 1, 0, 0]
    fields = _fields(payload, ASSIGN_FIELDS, "assign")
    epoch, task, attempt, name, command, inputs, outputs, runtime, cpus, memory, disk = fields
    return _int(epoch, "epoch"), Assignment(
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
