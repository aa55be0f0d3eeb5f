"""The pool's pure parts: notification payloads, session names, the PilotMonitor's role against
a fake database session (the real one: tests/integration/tq/test_tq_pool.py), and the several
candidates a take is offered."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from glidein_ext.tq.models import MatchSpec, PilotInfo, QueuedTask
from glidein_ext.tq.service.matching.matcher import Matcher
from glidein_ext.tq.service.pool.leader import MONITOR_LOCK, AdvisoryLeader, SoleLeader
from glidein_ext.tq.service.pool.notify import (
    instance_name,
    is_pool_url,
    libpq_url,
    named_url,
    parse,
)


def test_parse_gives_each_rows_last_state_and_who_made_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    news = parse(
        [
            "t1 queued tq-b",
            "t2 running tq-a",
            "P7 idle tq-b",
            "t1 running tq-c",  # later in commit order: wins
            "p7 busy tq-b",  # a state change after a registration: still to be read
            "p8 lost tq-a",
            "x9 idle tq-b",
            "t queued tq-b",
            "p-3 idle tq-b",
            "p8",
        ],
        own="tq-a",
    )
    assert news.tasks == {1: ("running", False), 2: ("running", True)}
    assert news.pilots == {7: ("busy", False, True), 8: ("lost", True, False)}
    assert caplog.text.count("malformed pool notification") == 4


def test_session_names_travel_in_the_url_and_leave_for_libpq() -> None:
    url = "postgresql+psycopg://tq:secret@db.example.org:5433/tq?sslmode=require"
    named = named_url(url, "tq-x-1")
    assert "application_name=tq-x-1" in named and "secret" in named
    plain = libpq_url(sa.engine.make_url(named))
    assert plain.startswith("postgresql://tq:secret@db.example.org:5433/tq")
    assert "sslmode=require" in plain and "application_name" not in plain
    assert named_url("sqlite:////tmp/tq.sqlite", "x") == "sqlite:////tmp/tq.sqlite"
    assert is_pool_url(url) and not is_pool_url("sqlite:///tq.sqlite")
    name = instance_name()
    assert name.startswith("tq-") and len(name) <= 63 and name != instance_name()


class FakeSession:
    """A database session: answers the lock question, dies on demand."""

    def __init__(self, granted: bool) -> None:
        self.granted = granted
        self.closed = False
        self.broken = False  # the server side went away; the client notices at the next call
        self.calls: list[tuple[str, Any]] = []

    def execute(self, query: str, params: Any = None) -> FakeSession:
        if self.closed or self.broken:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        self.calls.append((query, params))
        return self

    def fetchone(self) -> tuple[bool]:
        return (self.granted,)

    def close(self) -> None:
        self.closed = True


def test_the_role_is_held_kept_and_lost_with_the_session() -> None:
    sessions: list[FakeSession] = []
    answers = iter([False, True, True])

    def connect(_conninfo: str, **_options: Any) -> FakeSession:
        sessions.append(FakeSession(next(answers)))
        return sessions[-1]

    leader = AdvisoryLeader("postgresql://db/tq", "tq-a", connect=connect)
    assert not leader.held()  # another instance holds it
    assert leader.held() is False  # asked again on the same session: still held elsewhere
    assert len(sessions) == 1
    assert sessions[0].calls[0] == ("SELECT pg_try_advisory_lock(%s)", (MONITOR_LOCK,))
    sessions[0].granted = True  # the holder died: the lock is free
    assert leader.held()
    assert leader.held()  # kept: only a liveness check now
    assert sessions[0].calls[-1] == ("SELECT 1", None)
    sessions[0].broken = True  # the session broke: the lock is gone with it
    assert not leader.held()
    assert leader.held() and len(sessions) == 2  # a new session asks again and gets it
    leader.close()
    assert sessions[1].closed


def test_an_unreachable_database_means_standing_by() -> None:
    def connect(_conninfo: str, **_options: Any) -> FakeSession:
        raise psycopg.OperationalError("connection refused")

    assert not AdvisoryLeader("postgresql://db/tq", "tq-a", connect=connect).held()
    assert SoleLeader().held()


def test_choose_several_gives_the_best_first_and_leaves_the_queue_as_it_was() -> None:
    matcher = Matcher()
    for task_id, priority in ((1, 0), (2, 5), (3, 1), (4, 5)):
        matcher.add_task(QueuedTask(task_id, MatchSpec(), priority=priority))
    matcher.add_task(QueuedTask(5, MatchSpec(request_cpus=64)))  # fits nobody here
    matcher.add_pilot(PilotInfo(7, cpus=4))
    before = matcher.choose(7, 0.0)
    several = matcher.choose_several(7, 0.0, 3)
    assert [c.task_id for c in several] == [2, 4, 3]  # by priority, then age
    assert before is not None and several[0] == before
    assert matcher.task_ids() == {1, 2, 3, 4, 5} and matcher.choose(7, 0.0) == before
    assert [c.task_id for c in matcher.choose_several(7, 0.0, 9)] == [2, 4, 3, 1]
    assert matcher.choose_several(7, 0.0, 1) == [before]
