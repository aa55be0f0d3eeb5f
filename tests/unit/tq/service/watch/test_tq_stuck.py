"""The stuck-work detector (tq.service.watch.stuck), driven with plain snapshots and times."""

from __future__ import annotations

from glidein_ext.tq.service.watch.stuck import (
    NO_PROGRESS,
    QUEUED_IDLE,
    SILENT_PILOT,
    BusyPilot,
    QueuedTask,
    Snapshot,
    StuckDetector,
    Thresholds,
    WorkflowProgress,
    cleared,
    new_warnings,
)

LIMITS = Thresholds(queued_after=60, silent_after=30, stalled_after=600)


def test_a_task_queued_while_a_matching_pilot_stays_idle_is_warned_after_the_threshold() -> None:
    detector = StuckDetector(LIMITS)
    waiting = QueuedTask(task_id=7, workflow_id=1, idle_matches=(3, 4))
    assert detector.observe(Snapshot(now=100, queued=[waiting])) == []
    assert detector.observe(Snapshot(now=160, queued=[waiting])) == []  # exactly the threshold
    (warning,) = detector.observe(Snapshot(now=161, queued=[waiting]))
    assert warning.kind == QUEUED_IDLE and warning.subject == "task 7" and warning.since == 100
    assert "queued for 61 s while pilot(s) 3, 4 that may run it stay idle" in warning.message
    assert detector.current == [warning]


def test_the_clock_restarts_when_no_idle_pilot_matches_for_one_snapshot() -> None:
    detector = StuckDetector(LIMITS)
    idle = QueuedTask(7, 1, (3,))
    nobody = QueuedTask(7, 1, ())
    detector.observe(Snapshot(now=0, queued=[idle]))
    detector.observe(Snapshot(now=50, queued=[nobody]))  # the pilot took other work meanwhile
    assert detector.observe(Snapshot(now=100, queued=[idle])) == []
    assert detector.observe(Snapshot(now=161, queued=[idle]))[0].since == 100


def test_a_task_without_any_matching_idle_pilot_is_never_a_queued_idle_warning() -> None:
    detector = StuckDetector(LIMITS)
    for now in (0, 100, 1000):
        assert detector.observe(Snapshot(now=now, queued=[QueuedTask(1, 1, ())])) == []


def test_busy_pilots_without_heartbeats_and_workflows_without_progress() -> None:
    detector = StuckDetector(LIMITS)
    snapshot = Snapshot(
        now=1000,
        busy=[BusyPilot(5, "T1", 9, last_seen=960), BusyPilot(6, "T1", 10, last_seen=990)],
        workflows=[
            WorkflowProgress(1, "w1", unfinished=4, running=0, last_change=300),
            WorkflowProgress(2, "w2", unfinished=4, running=2, last_change=0),  # running: fine
            WorkflowProgress(3, "w3", unfinished=1, running=0, last_change=500),  # recent
        ],
    )
    found = {(w.kind, w.subject): w for w in detector.observe(snapshot)}
    assert set(found) == {(SILENT_PILOT, "pilot 5"), (NO_PROGRESS, "workflow 1")}
    assert "busy running task 9 but silent for 40 s" in found[(SILENT_PILOT, "pilot 5")].message
    assert (
        "no progress for 700 s: 4 task(s) unfinished" in found[(NO_PROGRESS, "workflow 1")].message
    )


def test_new_and_cleared_warnings_are_told_apart_for_the_log() -> None:
    detector = StuckDetector(LIMITS)
    first = detector.observe(Snapshot(now=100, busy=[BusyPilot(5, "T1", None, 0)]))
    second = detector.observe(
        Snapshot(now=101, busy=[BusyPilot(5, "T1", None, 0), BusyPilot(6, "T1", None, 0)])
    )
    assert [w.subject for w in new_warnings(first, second)] == ["pilot 6"]
    third = detector.observe(Snapshot(now=102, busy=[BusyPilot(6, "T1", None, 0)]))
    assert [w.subject for w in cleared(second, third)] == ["pilot 5"]


def test_a_stalled_workflow_whose_tasks_match_no_live_pilot_says_so() -> None:
    detector = StuckDetector(Thresholds(stalled_after=100))
    snapshot = Snapshot(
        now=1000,
        workflows=[
            WorkflowProgress(1, "w1", 2, 0, last_change=0, queued=2, unmatched=(4, 5)),
            WorkflowProgress(2, "w2", 3, 0, last_change=0, queued=3, unmatched=(7,)),
            WorkflowProgress(3, "w3", 1, 0, last_change=0, queued=1),
        ],
    )
    found = {w.subject: w.message for w in detector.observe(snapshot)}
    assert found["workflow 1"].endswith(
        "none running; none of its 2 queued task(s) matches a live pilot (why: tq task 4)"
    )
    assert found["workflow 2"].endswith(
        "; 1 of its 3 queued task(s) match no live pilot (why: tq task 7)"
    )
    assert found["workflow 3"].endswith("none running")
