"""``Store.complete_and_request`` on a real SQLite file: a busy pilot's report and its next task in
one transaction, with the semantics of ``complete`` followed by ``request``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from glidein_ext.errors import TaskQueueNotFound
from glidein_ext.tq.client.protocol import (
    CompleteAndRequest,
    CompleteAndRequestAnswer,
    Completion,
    CompletionAnswer,
    Registration,
    TaskAssignment,
)
from glidein_ext.tq.models import Architecture
from glidein_ext.tq.service import tables
from glidein_ext.tq.service.db import make_engine, migrate
from glidein_ext.tq.service.store import Store
from glidein_ext.tq.workflow import generate, parse_workflow
from tests.support.clock import Clock


def _store(tmp_path: Path, **options: Any) -> Store:
    engine = make_engine(str(tmp_path / "tq.sqlite"))
    migrate(engine)
    store = Store(engine, clock=Clock(), **options)
    store.load()
    return store


def _tasks(count: int, **fields: Any) -> Any:
    tasks = [{"name": f"t{i}", "command": "true", **fields} for i in range(count)]
    return parse_workflow({"name": "w", "tasks": tasks})


def _done(task: TaskAssignment, exit_code: int = 0) -> CompleteAndRequest:
    return CompleteAndRequest(Completion(task.task_id, task.attempt, exit_code, task.outputs))


def _running(store: Store, workflow: Any) -> tuple[int, TaskAssignment]:
    """``workflow`` submitted, a pilot of site S registered and running the task it asked for."""
    store.submit(workflow)
    pilot = store.register(Registration(site="S", host="h")).pilot_id
    task = store.request(pilot)
    assert task is not None
    return pilot, task


def _pilot_row(store: Store, pilot: int) -> Any:
    with store.engine.connect() as conn:
        return conn.execute(sa.select(tables.pilots).where(tables.pilots.c.id == pilot)).one()


def test_a_pilot_runs_a_workflow_with_one_call_per_task(tmp_path: Path) -> None:
    store = _store(tmp_path)
    pilot, first = _running(store, _tasks(5))
    task: TaskAssignment | None = first
    names = []
    while task is not None:
        names.append(task.name)
        answer = store.complete_and_request(pilot, _done(task))
        assert answer.result == CompletionAnswer(accepted=True, duplicate=False, state="done")
        if answer.task is not None:  # the next task is this pilot's now, as a request's
            row = _pilot_row(store, pilot)
            assert (row.state, row.task_id) == ("busy", answer.task.task_id)
        task = answer.task
    assert sorted(names) == [f"t{i}" for i in range(5)]
    row = _pilot_row(store, pilot)
    assert (row.state, row.task_id) == ("idle", None)
    status = store.status()
    assert status.workflows[0].tasks["done"] == 5 and status.completions == 5


def test_a_repeated_call_is_a_duplicate_and_hands_the_same_task(tmp_path: Path) -> None:
    """The answer was lost and the pilot sends the call again: counted once, same next task."""
    store = _store(tmp_path)
    pilot, first = _running(store, _tasks(3))
    once = store.complete_and_request(pilot, _done(first))
    again = store.complete_and_request(pilot, _done(first))
    assert once.result.accepted and not once.result.duplicate
    assert again.result == CompletionAnswer(accepted=False, duplicate=True, state="done")
    assert once.task is not None and again.task == once.task
    assert store.status().completions == 1


def test_released_tasks_go_to_the_plain_request_that_follows(tmp_path: Path) -> None:
    """A task the completion releases is queued in the same transaction, and offered to the
    matcher after the commit: the combined answer has no task, a request then finds it."""
    store = _store(tmp_path)
    producer = {"name": "make", "command": "true", "outputs": ["/store/a.dat"]}
    reader = {"name": "read", "command": "true", "inputs": ["/store/a.dat"]}
    pilot, make = _running(store, parse_workflow({"name": "chain", "tasks": [producer, reader]}))
    assert make.name == "make"
    answer = store.complete_and_request(pilot, _done(make))
    assert answer.result.accepted and answer.task is None  # "read" waits for the commit
    read = store.request(pilot)
    assert read is not None and read.name == "read"
    assert read.cached_inputs == 1  # the file it produced counts as cached at the pilot


def test_a_failed_attempt_is_requeued_and_offered_to_the_next_request(tmp_path: Path) -> None:
    """The failed task is queued again by the completion: no task in the answer, the plain
    request that follows chooses among all of them, the retried one included."""
    store = _store(tmp_path)
    pilot, first = _running(store, _tasks(1, max_retries=1))
    answer = store.complete_and_request(pilot, _done(first, exit_code=3))
    assert answer == CompleteAndRequestAnswer(
        CompletionAnswer(accepted=True, duplicate=False, state="queued"), None
    )
    again = store.request(pilot)
    assert again is not None and (again.task_id, again.attempt) == (first.task_id, 2)


def test_the_request_carries_the_cache_list(tmp_path: Path) -> None:
    """Centralized: the call's cache list is the pilot's, and the choice uses it."""
    store = _store(tmp_path, default_architecture=Architecture.CENTRALIZED)
    spec = {
        "name": "w",
        "tasks": [
            {"name": "first", "command": "true"},
            {"name": "other", "command": "true", "inputs": ["/store/b.dat"]},
            {"name": "mine", "command": "true", "inputs": ["/store/a.dat"]},
        ],
        "available": ["/store/a.dat", "/store/b.dat"],
    }
    pilot, first = _running(store, parse_workflow(spec))
    assert first.name == "first"
    call = CompleteAndRequest(_done(first).completion, ("/store/a.dat",))
    answer = store.complete_and_request(pilot, call)
    assert answer.task is not None and answer.task.name == "mine"
    assert answer.task.cached_inputs == 1
    assert _pilot_row(store, pilot).cached == '["/store/a.dat"]'


def test_an_unknown_task_changes_nothing(tmp_path: Path) -> None:
    store = _store(tmp_path)
    pilot, task = _running(store, _tasks(2))
    with pytest.raises(TaskQueueNotFound):
        store.complete_and_request(pilot, CompleteAndRequest(Completion(999, 1, 0)))
    row = _pilot_row(store, pilot)
    assert (row.state, row.task_id) == ("busy", task.task_id)  # the transaction rolled back
    assert store.status().completions == 0


def test_a_lost_pilot_s_stale_report_gets_no_task(tmp_path: Path) -> None:
    store = _store(tmp_path, heartbeat_timeout=10)
    pilot, task = _running(store, _tasks(2))
    store.clock = Clock(5000.0)  # its heartbeat lapsed: lost, its task requeued
    assert store.reap() == [pilot]
    answer = store.complete_and_request(pilot, _done(task))
    assert answer.result.accepted is False and answer.task is None


def test_each_call_of_several_is_its_own_transaction_and_error(tmp_path: Path) -> None:
    """``complete_and_request_each``: in order, each as alone; an error stands in its place (its
    transaction rolled back) and the calls after it are served."""
    store = _store(tmp_path)
    store.submit(_tasks(5))
    pilots = [store.register(Registration(site="S", host=f"h{i}")).pilot_id for i in range(2)]
    held = [task for task in map(store.request, pilots) if task is not None]
    assert len(held) == 2
    calls = [
        (pilots[0], _done(held[0])),
        (pilots[1], CompleteAndRequest(Completion(999, 1, 0))),  # no such task
        (pilots[1], _done(held[1])),
    ]
    first, refused, third = store.complete_and_request_each(calls)
    assert isinstance(first, CompleteAndRequestAnswer) and first.result.accepted
    assert isinstance(refused, TaskQueueNotFound)
    assert isinstance(third, CompleteAndRequestAnswer) and third.result.accepted
    assert first.task is not None and third.task is not None
    assert first.task.task_id != third.task.task_id  # the second saw the first's take
    assert store.status().completions == 2
    for pilot, task in ((pilots[0], first.task), (pilots[1], third.task)):
        row = _pilot_row(store, pilot)
        assert (row.state, row.task_id) == ("busy", task.task_id)


def _commits(store: Store) -> list[int]:
    """How many transactions committed on the store's engine from now on (a list of one)."""
    count = [0]
    sa.event.listen(store.engine, "commit", lambda _conn: count.__setitem__(0, count[0] + 1))
    return count


def test_several_calls_that_all_succeed_commit_once(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.submit(_tasks(8))
    pilots = [store.register(Registration(site="S", host=f"h{i}")).pilot_id for i in range(3)]
    held = [task for task in map(store.request, pilots) if task is not None]
    commits = _commits(store)
    answers = store.complete_and_request_each(
        [(pilot, _done(task)) for pilot, task in zip(pilots, held, strict=True)]
    )
    assert commits == [1]
    nexts = [a.task.task_id for a in answers if isinstance(a, CompleteAndRequestAnswer) and a.task]
    # each took its own task: the earlier calls' takes were passed by in the transaction
    assert len(set(nexts)) == 3 and not set(nexts) & {t.task_id for t in held}
    assert store.status().completions == 3
    # one call failing: rolled back whole, then each call in its own transaction
    calls = [(pilots[0], CompleteAndRequest(Completion(999, 1, 0)))]
    rest = zip(pilots[1:], _held(answers[1:]), strict=True)
    calls += [(pilot, _done(task)) for pilot, task in rest]
    commits[0] = 0
    refused, *served = store.complete_and_request_each(calls)
    assert isinstance(refused, TaskQueueNotFound)
    assert all(isinstance(a, CompleteAndRequestAnswer) and a.result.accepted for a in served)
    assert commits == [2]  # the two that succeeded, each its own
    assert store.status().completions == 5


def _held(answers: Any) -> list[TaskAssignment]:
    return [a.task for a in answers if a.task is not None]


def _workflow(kind: str) -> Any:
    return _tasks(16) if kind == "trivial" else parse_workflow(generate(kind, scale=6 / 80))


@pytest.mark.parametrize("kind", ["trivial", "w1", "w2", "w3"])
@pytest.mark.parametrize("architecture", [Architecture.PRE_DHT, Architecture.CENTRALIZED])
def test_calls_together_get_the_answers_they_get_one_after_the_other(
    tmp_path: Path, kind: str, architecture: Architecture
) -> None:
    """Two stores in the same state run a workflow (independent tasks, or chained ones: inputs,
    outputs, the cache-aware choice and released tasks), one calling ``complete_and_request``
    for each pilot in turn, the other ``complete_and_request_each`` with all of them: the same
    answers, every round, to the end.  Every other round ends with a call that fails (the calls
    together are rolled back, then run each alone): still the same answers, and no task is left
    behind."""
    for name in ("one", "all"):
        (tmp_path / name).mkdir()
    stores = [_store(tmp_path / name, default_architecture=architecture) for name in ("one", "all")]
    held: list[dict[int, TaskAssignment | None]] = []
    for store in stores:
        store.submit(_workflow(kind))
        pilots = [store.register(Registration(site="S", host=f"h{i}")).pilot_id for i in range(4)]
        held.append({pilot: store.request(pilot, ("/cache/p",)) for pilot in pilots})
    assert held[0] == held[1]
    rounds = 0
    while any(held[0].values()):
        rounds += 1
        busy = [(pilot, task) for pilot, task in held[0].items() if task is not None]
        calls = [(pilot, _done(task)) for pilot, task in busy]
        if rounds % 2:
            calls.append((busy[0][0], CompleteAndRequest(Completion(999, 1, 0))))
        alone = [_answer_or_error(stores[0], pilot, call) for pilot, call in calls]
        together = stores[1].complete_and_request_each(calls)
        assert [_shown(a) for a in together] == [_shown(a) for a in alone], rounds
        for index, (pilot, _task) in enumerate(busy):
            for store, answers, tasks in zip(stores, (alone, together), held, strict=True):
                answer = answers[index]
                assert isinstance(answer, CompleteAndRequestAnswer)
                tasks[pilot] = answer.task or store.request(pilot)  # released: asks again
        assert held[0] == held[1], rounds
    for store in stores:  # every task ran: none was lost to the matcher by a rollback
        assert store.status().completions == len(_workflow(kind).tasks)
    assert rounds > 2


def _answer_or_error(store: Store, pilot: int, call: CompleteAndRequest) -> Any:
    try:
        return store.complete_and_request(pilot, call)
    except TaskQueueNotFound as exc:
        return exc


def _shown(answer: Any) -> Any:
    return (type(answer), str(answer)) if isinstance(answer, Exception) else answer
