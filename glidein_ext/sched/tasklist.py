"""The TaskList and the workers' replies as they travel over the site DHT (Delgado Peris 2014
§III.B), pure.

The master broadcasts one TaskList per round: the round, its epoch, itself (pilot id and DHT
address), the succession list (the live pilots with the lowest ids and their DHT addresses, who
take over if it dies),
how many ranks each worker may send (``limit``), the distinct task specs once, and per task its
id, its spec's index and its inputs.  Each worker answers with one reply, and the aggregation tree
concatenates the replies (``combine``).  A reply is a flat list of integers::

    [pilot id, current task (0: idle), last finished task (0: none), allowed,
     position, rank * SCALE, position, rank * SCALE, ...]

``position`` is the task's index in the TaskList; ranks travel as integers (``SCALE`` = 1000),
so a reply of 4 ranks is about 30 bytes and 1,500 idle workers fit in one datagram.  A busy worker
sends only its first four numbers.  Decoding is strict: anything malformed raises ValueError
(the master drops that reply).

Python 3.9, standard library only (the pilots run it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from glidein_ext.dht import fields
from glidein_ext.sched.ranking import InputFile, Ranking, TaskEntry, TaskSpec

SCALE = 1000
REPLY_HEAD = 4
MAX_LIMIT = 64


@dataclass(frozen=True)
class TaskList:
    """One round's TaskList; ``tasks[i].task_id`` is the Task Queue's task id."""

    round: int
    epoch: int
    master: int
    address: tuple[str, int]
    successors: tuple[tuple[int, tuple[str, int]], ...]  # (pilot id, DHT address)
    limit: int
    tasks: tuple[TaskEntry, ...] = ()


class Reply(NamedTuple):
    """One worker's answer: its state, and its ranks by TaskList position.  A named tuple: a
    master decodes one per worker and round (1,500 a round at a CMS site), and a frozen
    dataclass costs twice its decoding to make."""

    pilot_id: int
    current: int  # the task it runs or is reporting; 0: idle
    last_done: int  # the last task it finished; 0: none
    allowed: int  # tasks of the TaskList it may run
    ranks: dict[int, float]

    @property
    def idle(self) -> bool:
        return self.current == 0

    @property
    def truncated(self) -> bool:
        return self.allowed > len(self.ranks)


def _spec_wire(spec: TaskSpec) -> list[Any]:
    return [
        spec.requirements,
        spec.rank,
        spec.request_cpus,
        spec.request_memory,
        spec.request_disk,
        float(spec.max_runtime),
        [[name, value] for name, value in spec.attributes],
    ]


def encode_tasklist(tasklist: TaskList) -> dict[str, Any]:
    """The broadcast payload (a value the DHT's wire format carries)."""
    specs: dict[TaskSpec, int] = {}
    tasks = []
    for entry in tasklist.tasks:
        index = specs.setdefault(entry.spec, len(specs))
        tasks.append([entry.task_id, index, [item.lfn for item in entry.inputs]])
    return {
        "r": tasklist.round,
        "e": tasklist.epoch,
        "m": tasklist.master,
        "a": [tasklist.address[0], tasklist.address[1]],
        "s": [[pilot, host, port] for pilot, (host, port) in tasklist.successors],
        "l": tasklist.limit,
        "p": [_spec_wire(spec) for spec in specs],
        "t": tasks,
    }


def _spec(raw: Any) -> TaskSpec:
    requirements, rank, cpus, memory, disk, runtime, attributes = fields.items(raw, "spec", 7)
    attrs = []
    for pair in fields.items(attributes, "spec attributes"):
        name, value = fields.items(pair, "attribute", 2)
        if not isinstance(value, (bool, int, float, str)):
            raise fields.FieldError("attribute: not a scalar")
        attrs.append((fields.text(name, "attribute name"), value))
    return TaskSpec(
        fields.text(requirements, "requirements"),
        fields.text(rank, "rank"),
        fields.integer(cpus, "request_cpus"),
        fields.integer(memory, "request_memory"),
        fields.integer(disk, "request_disk"),
        fields.number(runtime, "max_runtime"),
        tuple(attrs),
    )


def _successor(raw: Any) -> tuple[int, tuple[str, int]]:
    pilot, host, port = fields.items(raw, "successor", 3)
    return fields.integer(pilot, "successor"), (
        fields.text(host, "host"),
        fields.integer(port, "port"),
    )


def decode_tasklist(payload: Any, with_tasks: bool = True) -> TaskList:
    """The TaskList from a broadcast payload; ValueError if malformed.  ``with_tasks=False``:
    all but the tasks (``tasks`` empty), what a busy worker needs: decoding a TaskList of a
    thousand tasks for each of the pilots a process runs holds its event loop up."""
    if not isinstance(payload, Mapping):
        raise fields.FieldError("a TaskList is a map")
    address = fields.address(payload.get("a"), "master address")
    specs = [_spec(raw) for raw in fields.items(payload.get("p"), "specs")] if with_tasks else []
    tasks = []
    for raw in fields.items(payload.get("t"), "tasks") if with_tasks else []:
        task_id, index, inputs = fields.items(raw, "task", 3)
        index = fields.integer(index, "spec index")
        if not 0 <= index < len(specs):
            raise fields.FieldError("task: spec index out of range")
        files = tuple(InputFile(lfn) for lfn in fields.texts(inputs, "inputs"))
        tasks.append(TaskEntry(fields.integer(task_id, "task id"), specs[index], files))
    limit = fields.integer(payload.get("l"), "limit")
    return TaskList(
        round=fields.integer(payload.get("r"), "round"),
        epoch=fields.integer(payload.get("e"), "epoch"),
        master=fields.integer(payload.get("m"), "master"),
        address=address,
        successors=tuple(_successor(item) for item in fields.items(payload.get("s"), "successors")),
        limit=max(1, min(limit, MAX_LIMIT)),
        tasks=tuple(tasks),
    )


def encode_reply(pilot_id: int, current: int, last_done: int, ranking: Ranking | None) -> Any:
    """One worker's reply, as a list of one reply (the form ``combine`` concatenates)."""
    flat = [pilot_id, current, last_done, 0 if ranking is None else ranking.allowed]
    if ranking is not None:
        for position, rank in ranking.ranks.items():
            flat.append(position)
            flat.append(round(rank * SCALE))
    return [flat]


def combine(parts: list[Any]) -> list[Any]:
    """The aggregation tree's fold: concatenate lists of replies (associative)."""
    merged: list[Any] = []
    for part in parts:
        if isinstance(part, list):
            merged.extend(part)
    return merged


def decode_replies(value: Any, n_tasks: int) -> list[Reply]:
    """The replies in an aggregated answer; a malformed reply is skipped, a repeated pilot
    keeps its first reply."""
    replies: dict[int, Reply] = {}
    for raw in value if isinstance(value, list) else []:
        try:
            reply = _reply(raw, n_tasks)
        except ValueError:
            continue
        replies.setdefault(reply.pilot_id, reply)
    return list(replies.values())


def _reply(raw: Any, n_tasks: int) -> Reply:
    if type(raw) is list and len(raw) == REPLY_HEAD:  # no ranks (a busy worker's): most replies
        pilot_id, current, last_done, allowed = raw
        if type(pilot_id) is type(current) is type(last_done) is type(allowed) is int:
            return Reply(pilot_id, current, last_done, max(allowed, 0), {})
    items = fields.items(raw, "reply")
    if len(items) < REPLY_HEAD or (len(items) - REPLY_HEAD) % 2:
        raise fields.FieldError("reply: bad length")
    numbers = [fields.integer(item, "reply") for item in items]
    ranks: dict[int, float] = {}
    for i in range(REPLY_HEAD, len(numbers), 2):
        position = numbers[i]
        if not 0 <= position < n_tasks or position in ranks:
            raise fields.FieldError("reply: bad task position")
        ranks[position] = numbers[i + 1] / SCALE
    pilot_id, current, last_done, allowed = numbers[:REPLY_HEAD]
    return Reply(pilot_id, current, last_done, max(allowed, len(ranks)), ranks)


def reply_limit(repliers: int, budget: int, per_rank: int = 6, head: int = 16) -> int:
    """How many ranks each of ``repliers`` idle workers may send so that all their replies fit
    ``budget`` bytes (the aggregate travels in one datagram), between 1 and ``MAX_LIMIT``."""
    if repliers <= 0:
        return MAX_LIMIT
    each = budget / repliers - head
    return max(1, min(MAX_LIMIT, int(each // per_rank)))


def fit_tasks(
    entries: Sequence[TaskEntry],
    build: Callable[[Sequence[TaskEntry]], Any],
    measure: Callable[[Any], int],
    budget: int,
) -> tuple[Any, int]:
    """The payload ``build(entries[:n])`` for the largest ``n`` whose ``measure`` fits ``budget``
    (the TaskList travels in one datagram; the rest waits for the next round), and ``n``."""
    best = build(entries[:0])
    if measure(best) > budget:
        raise ValueError("even an empty TaskList does not fit")
    full = build(entries)
    if measure(full) <= budget:
        return full, len(entries)
    low, high = 0, len(entries) - 1
    while low < high:  # entries[:low] fits; entries[:high + 1] is the longest that may
        middle = (low + high + 1) // 2
        candidate = build(entries[:middle])
        if measure(candidate) <= budget:
            low, best = middle, candidate
        else:
            high = middle - 1
    return best, low
