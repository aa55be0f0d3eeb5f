"""The master's round bookkeeping (Delgado Peris 2014 §III.B-C), driven synchronously."""

from __future__ import annotations

from glidein_ext.sched.rounds import POLL_BEATS, POLL_MAX, Candidates, RoundBook
from glidein_ext.sched.tasklist import Reply
from glidein_ext.tq.service.site_waits import MAX_WAIT

A = ("10.0.0.2", 4000)


def _book(now: float = 0.0) -> RoundBook:
    return RoundBook(1, window=0.2, period=2.0, heartbeat=3.0, miss_limit=2, now=now)


def _idle(pilot: int, ranks: dict[int, float] | None = None, last: int = 0) -> Reply:
    ranks = ranks or {}
    return Reply(pilot, 0, last, len(ranks), ranks)


def test_events_start_a_window_and_the_period_is_the_fallback() -> None:
    book = _book()
    assert not book.round_due(1.9) and book.round_due(2.0)
    book.start_round(2.0)
    book.join(7, A, now=2.5)  # a hello: a round after the window
    assert not book.round_due(2.6)
    assert book.round_due(2.7)
    assert abs(book.next_wakeup(2.6) - 0.1) < 1e-9
    book.start_round(2.7)
    assert not book.round_due(4.6) and book.round_due(4.7)
    book.join(1, A, now=3.0)  # the master itself is not a worker
    assert list(book.workers) == [7]


def test_a_wave_of_events_makes_one_round() -> None:
    book = _book()
    for at in (0.0, 0.15, 0.3):  # completions trickling in
        book.completed(7, (40 + int(at * 100), 1), "c", now=at)
    assert not book.round_due(0.45) and book.round_due(0.5)  # 0.2 s after the last one
    book.start_round(0.5)
    for step in range(20):  # a steady stream: the round still comes, 5 windows after the first
        book.completed(7, (100 + step, 1), "c", now=1.0 + 0.1 * step)
    assert not book.round_due(1.95) and book.round_due(2.0)


def test_a_full_batch_starts_its_round_at_once() -> None:
    """A wave of completions at a large site: the round comes once a tenth of the site (at least
    8 workers) is free, not 5 windows after the first completion; a small site still waits."""
    book = _book()
    for pilot in range(100, 200):
        book.join(pilot, A, now=0.0, task=(pilot, 1))
    assert book.full_batch == 10
    book.start_round(0.0)
    for n, pilot in enumerate(range(100, 109)):
        book.completed(pilot, (pilot, 1), "c", now=1.0 + 0.01 * n)
    assert not book.round_due(1.09)  # 9 freed, the window not over
    book.completed(109, (109, 1), "c", now=1.09)
    assert book.round_due(1.09)  # 10 freed: full
    book.start_round(1.09)
    book.completed(110, (110, 1), "c", now=1.1)
    assert not book.round_due(1.1)  # the count starts again with the round
    resend = book.completed(109, (109, 1), "c", now=1.1)
    assert not resend and not book.round_due(1.1)  # a resend frees nobody
    small = _book()
    for pilot in range(10, 20):
        small.join(pilot, A, now=0.0, task=(pilot, 1))
    assert small.full_batch == 8
    small.start_round(0.5)
    for pilot in range(10, 17):
        small.completed(pilot, (pilot, 1), "c", now=1.0)
    assert not small.round_due(1.0) and small.round_due(1.2)  # 7 < 8: the window decides
    period = RoundBook(1, window=20.0, period=20.0, heartbeat=60.0, full_fraction=0.0, now=0.0)
    for pilot in range(100, 200):
        period.join(pilot, A, now=0.0, task=(pilot, 1))
    period.start_round(0.5)
    for pilot in range(100, 200):  # the whole site freed: the paper's master still waits
        period.completed(pilot, (pilot, 1), "c", now=1.0)
    assert period.full_batch == 0 and not period.round_due(20.0) and period.round_due(21.0)


def test_a_batch_that_frees_every_busy_worker_is_full() -> None:
    """A site smaller than a full batch (7 workers, 8 freed make one full): once its last busy
    worker is free no completion is left to batch with, so the round comes at once instead of a
    window later; one busy worker left and the window decides again."""
    book = _book()
    for pilot in range(10, 17):
        book.join(pilot, A, now=0.0, task=(pilot, 1))
    book.start_round(0.5)
    for pilot in range(10, 16):
        book.completed(pilot, (pilot, 1), "c", now=1.0)
    assert not book.round_due(1.0)  # worker 16 still runs its task
    book.completed(16, (16, 1), "c", now=1.01)
    assert book.round_due(1.01)  # all 7 free: full
    book.start_round(1.01)
    book.assigned([(20, 10, 1), (21, 11, 1)])
    assert not book.round_due(1.02)  # nothing freed since the round
    book.completed(10, (20, 1), "c", now=1.05)
    assert not book.round_due(1.05) and book.round_due(1.25)  # 11 busy: the window
    book.start_round(1.25)
    book.join(30, A, now=1.3)  # an event that frees nobody (a hello) is no full batch
    assert not book.round_due(1.3) and book.round_due(1.5)
    book.start_round(1.5)
    book.completed(11, (21, 1), "c", now=1.6)
    assert book.round_due(1.6)  # the last busy one


def test_a_busy_reply_older_than_the_completion_does_not_make_the_worker_busy_again() -> None:
    """Regression (real-process runs, 2026-11-26): a worker replies "busy with 40" to a TaskList,
    its completion of 40 reaches the master before the aggregated replies; the master took it
    for running 40 again, then awaited a completion that had come already (the worker idle until
    a resend or the patience).  Now the reply is read as stale: the worker stays a candidate."""
    book = _book()
    book.join(7, A, now=0.0, task=(40, 1))
    book.start_round(0.5)  # the TaskList goes out; 7 replies busy with 40
    book.completed(7, (40, 1), "c40", now=0.6)  # its completion comes before the replies
    book.replies([Reply(7, 40, 0, 0, {})])
    assert book.workers[7].task is None and 7 in book.idle()
    book.take_report(1.0)
    book.reported()
    assert book.replies([_idle(7, {0: 1.0}, last=40)]).pilots == (7,)
    assert book.awaiting() == []
    book.replies([Reply(7, 41, 40, 0, {})])  # busy with a task the master did not know of
    assert book.workers[7].task == (41, 0)


def test_a_resent_older_completion_does_not_make_a_stale_busy_reply_current() -> None:
    """Regression (the TaskVine bench's distributed runs, 2026-11-29): a worker resends the
    older completions no master said were synced (every 3 s); one of them came after the
    completion of 40 and became its "last", so a busy-with-40 reply formed before that
    completion made the master believe it ran 40 again: awaited for the patience (30 s), no
    candidate, and every batch waited for it.  A resend is not the worker's last completion."""
    book = _book()
    book.join(7, A, now=0.0, task=(30, 1))
    book.completed(7, (30, 1), "c30", now=0.1)
    book.take_report(0.2)
    book.reported()
    book.assigned([(40, 7, 1)])
    book.start_round(0.5)  # the TaskList goes out; 7 replies busy with 40
    book.completed(7, (40, 1), "c40", now=0.6)
    assert not book.completed(7, (30, 1), "c30", now=0.61)  # the resend: already synced
    book.replies([Reply(7, 40, 30, 0, {})])  # the stale reply
    assert book.workers[7].task is None and book.workers[7].finished == 40
    assert book.replies([_idle(7, {0: 1.0}, last=40)]).pilots == ()  # 40 not reported yet
    book.take_report(1.0)
    book.reported()
    assert book.replies([_idle(7, {0: 1.0}, last=40)]).pilots == (7,)
    assert book.awaiting() == []


def test_want_follows_the_idle_workers_and_the_heartbeat_is_owed() -> None:
    book = _book()
    for pilot in (7, 8, 9):
        book.join(pilot, A, now=0.0, task=(40, 1) if pilot == 9 else None)
    assert book.start_round(0.3) == 8  # 4 choices for each of the 2 idle workers
    assert not book.call_due(2.9)
    assert book.call_due(3.0)
    book.take_report(3.0)
    assert not book.call_due(3.1)


def test_completions_are_reported_once_and_kept_when_the_call_fails() -> None:
    book = _book()
    book.join(7, A, now=0.0, task=(40, 1))
    assert book.completed(7, (40, 1), "c40", now=1.0)
    assert book.workers[7].task is None
    assert not book.completed(7, (40, 1), "c40", now=1.1)  # a resend
    assert book.round_due(1.3)  # its round's call carries it
    report = book.take_report(1.2)
    assert report.completions == ((7, "c40"),)
    book.unreported(report)
    assert book.take_report(1.3).completions == ((7, "c40"),)
    book.reported()
    assert book.take_report(1.4).completions == ()
    assert not book.completed(7, (40, 1), "c40", now=2.0)  # reported: never again


def test_replies_give_the_matrix_columns_and_find_lost_tasks() -> None:
    book = _book()
    book.join(7, A, now=0.0)
    book.join(8, A, now=0.0, task=(41, 1))  # the TQ's list at a takeover
    book.join(9, A, now=0.0, task=(42, 1))
    book.join(10, A, now=0.0, task=(43, 1))
    candidates = book.replies(
        [
            Reply(7, 0, 0, 3, {0: 8.5, 2: 0.5}),  # idle, ranks 2 of 3 allowed: truncated
            _idle(8, {1: 1.0}),  # idle while believed to run 41: 41 was lost, released
            _idle(9, {0: 1.0}, last=42),  # finished 42 (its report is on its way): awaited
            Reply(10, 43, 0, 0, {}),  # busy, as believed
            _idle(99, {0: 9.0}),  # unknown (no hello yet): ignored
        ]
    )
    assert candidates.pilots == (7, 8)  # 9 is busy at the TQ until its completion comes
    assert book.awaiting() == [9]
    assert candidates.ranks[0] == {0: 8.5, 2: 0.5}
    assert candidates.truncated == (0,)
    assert book.take_report(1.0).release == (41,)
    assert book.workers[10].task == (43, 1)


def test_silent_workers_become_suspects_and_dead_ones_are_reported() -> None:
    book = _book()
    book.join(7, A, now=0.0)
    book.join(8, A, now=0.0, task=(41, 1))
    book.replies([_idle(7)])
    assert book.suspects() == []
    book.replies([_idle(7)])
    assert [w.pilot_id for w in book.suspects()] == [8]
    book.dead(8)
    assert 8 not in book.workers
    assert book.take_report(1.0).dead == (8,)
    book.join(7, A, now=2.0)
    assert book.successors() == ((7, A),)


def test_a_failed_probe_kills_only_a_worker_unheard_for_the_grace() -> None:
    # A busy process misses rounds and a probe; it is dead only after the silence a master gets.
    book = RoundBook(1, window=0.2, period=1.0, heartbeat=3.0, miss_limit=2, grace=10.0)
    book.join(7, A, now=0.0)
    book.join(8, A, now=0.0, task=(41, 1))
    book.start_round(4.0)
    book.replies([_idle(7)])  # 8 heard at 0 only
    book.start_round(5.0)
    book.replies([_idle(7)])
    assert [w.pilot_id for w in book.suspects()] == [8]
    assert not book.probe_failed(8, now=6.0)  # unheard for 6 s: still a suspect
    assert 8 in book.workers and book.take_report(6.0).dead == ()
    book.completed(8, (41, 1), "ok", now=7.0)  # a message from it: heard
    assert not book.probe_failed(8, now=16.0)
    assert book.probe_failed(8, now=17.0)  # unheard for the grace, probe failed: dead
    assert 8 not in book.workers and book.take_report(17.0).dead == (8,)
    assert not book.probe_failed(8, now=30.0)  # gone already: nothing more


def test_undelivered_assignments_go_back() -> None:
    book = _book()
    book.join(7, A, now=0.0)
    book.assigned([(50, 7, 2)])
    assert book.workers[7].task == (50, 2) and book.idle() == []
    book.undelivered(50, 7)
    assert book.idle() == [7]
    assert book.take_report(1.0).release == (50,)


def test_a_worker_is_no_candidate_until_its_completion_is_reported_or_carried() -> None:
    """Busy at the Task Queue until a call reports its completion; a round without a sync
    ranks it, since its assign carries the completion (recorded before the pairs)."""
    book = _book()
    book.join(7, A, now=0.0, task=(40, 1))
    book.completed(7, (40, 1), "c40", now=1.0)
    assert book.replies([_idle(7, {0: 1.0}, last=40)]).pilots == ()  # still busy at the TQ
    book.take_report(1.2)
    book.reported()
    assert book.replies([_idle(7, {0: 1.0}, last=40)]).pilots == (7,)
    book.assigned([(41, 7, 1)])
    book.completed(7, (41, 1), "c41", now=2.0)
    book.take_completions(2.2)  # this round's assign carries it
    assert book.replies([_idle(7, {0: 1.0}, last=41)]).pilots == (7,)
    book.unreported(book.take_completions(2.3))  # that assign failed: pending again
    assert book.replies([_idle(7, {0: 1.0}, last=41)]).pilots == ()


def test_a_round_whose_assign_carries_the_completions_reports_them_with_it() -> None:
    """A round without a sync (``sched.stock``): its assign carries the completions that came;
    the assign is the master's heartbeat too; if it fails, the next call carries them."""
    book = _book()
    book.join(7, A, now=0.0, task=(40, 1))
    book.join(8, A, now=0.0, task=(41, 1))
    book.join(9, A, now=0.0, task=(42, 1))
    book.completed(7, (40, 1), "c40", now=1.0)
    assert book.pending() == [((40, 1), 7, "c40")] and not book.news
    book.start_round(1.2)
    report = book.take_completions(1.2)
    assert report.completions == ((7, "c40"),) and report.dead == () == report.release
    book.completed(8, (41, 1), "c41", now=1.3)  # during the round: the next call's
    assert book.call_due(1.3 + book.heartbeat)
    book.reported(1.4)  # the assign got through: the Task Queue has c40, and it was a call
    assert book.synced((40, 1)) and not book.synced((41, 1))
    assert not book.call_due(1.3 + book.heartbeat) and book.call_due(1.4 + book.heartbeat)
    assert [key for key, _, _ in book.pending()] == [(41, 1)]
    report = book.take_completions(2.0)
    book.unreported(report)  # the assign failed: the next call carries it
    assert book.take_report(2.1).completions == ((8, "c41"),)
    book.dead(9)
    assert book.news


def test_completions_ride_the_round_they_trigger() -> None:
    book = _book()
    book.join(7, A, now=0.0, task=(40, 1))
    book.start_round(0.1)
    book.completed(7, (40, 1), "c40", now=1.0)
    assert not book.call_due(1.0)  # no call of its own: the round's call carries it
    assert book.round_due(1.2)
    book.start_round(1.2)
    assert book.call_due(1.2)
    assert book.take_report(1.2).completions == ((7, "c40"),)


def test_a_takeover_awaits_a_completion_the_old_master_held_then_releases() -> None:
    """Regression (500-pilot failover run): the old master acknowledged a completion and stepped
    down before syncing it; the Task Queue lists the pilot busy.  The new master must not offer
    that pilot tasks the Task Queue refuses forever: it awaits the completion (the worker
    resends it) and, failing that, releases the task so that both views converge."""
    book = RoundBook(1, window=0.2, period=2.0, heartbeat=3.0, patience=10.0, now=0.0)
    book.join(7, A, now=0.0, task=(40, 1))  # the TQ's list at the takeover
    book.join(8, A, now=0.0, task=(41, 1))
    book.start_round(1.0)
    assert book.replies([_idle(7, {0: 1.0}, last=40), _idle(8, {0: 1.0}, last=41)]).pilots == ()
    assert book.awaiting() == [7, 8] and book.take_report(1.0).release == ()
    book.completed(7, (40, 1), "c40", now=2.0)  # 7's resend reaches the new master
    assert book.awaiting() == [8]
    book.start_round(2.2)
    assert book.take_report(2.2).completions == ((7, "c40"),)
    book.reported()
    assert book.synced((40, 1))  # the worker is told; it forgets it
    assert book.replies([_idle(7, {0: 1.0}, last=40), _idle(8, {0: 1.0}, last=41)]).pilots == (7,)
    book.start_round(11.5)  # 8's completion never came: 41 goes back, 8 is free again
    book.replies([_idle(7, {0: 1.0}, last=40), _idle(8, {0: 1.0}, last=41)])
    assert book.awaiting() == [] and book.take_report(11.5).release == (41,)
    assert 8 in book.idle()


def test_a_resent_completion_of_an_earlier_attempt_leaves_the_retry_running() -> None:
    book = _book()
    book.join(7, A, now=0.0)
    book.assigned([(40, 7, 2)])  # the retry of 40, after attempt 1 failed on 7
    book.completed(7, (40, 1), "c40", now=1.0)  # attempt 1's completion, resent late
    assert book.workers[7].task == (40, 2)
    book.completed(7, (40, 2), "c40b", now=2.0)
    assert book.workers[7].task is None


def test_an_idle_reply_crossing_an_assignment_on_its_way_loses_nothing() -> None:
    """The master hands tasks out while its next round goes on: a worker that replies idle
    before its assignment arrived has not lost it (no release, no candidate)."""
    book = _book()
    book.join(7, A, now=0.0)
    book.assigned([(40, 7, 1)], delivering=True)
    candidates = book.replies([_idle(7, {0: 1.0})])
    assert candidates.pilots == () and book.take_report(1.0).release == ()
    assert book.workers[7].task == (40, 1)
    book.delivered(7)
    book.start_round(2.0)  # a TaskList sent after the acknowledgement
    book.replies([_idle(7, {0: 1.0})])  # delivered, and still idle: lost (released)
    assert book.take_report(2.0).release == (40,)


def test_an_idle_reply_formed_before_the_assignment_but_read_after_it_loses_nothing() -> None:
    """Round 2's TaskList reaches the worker before its round-1 assignment does; the worker
    acknowledges the assignment, and only then does the master read its (idle) reply: the task
    is not released (it would run twice), and the worker is no candidate.  The next round's
    reply, formed after the assignment, counts."""
    book = _book()
    book.join(7, A, now=0.0)
    book.start_round(1.0)
    book.assigned([(40, 7, 1)], delivering=True)  # round 1 assigns; the hand-out goes on
    book.start_round(2.0)  # round 2's TaskList goes out; the worker replies idle at once
    book.delivered(7)  # then the assignment arrives and is acknowledged
    candidates = book.replies([_idle(7, {0: 1.0}, last=39)])  # the reply is read now
    assert candidates.pilots == ()
    assert book.take_report(2.5).release == ()
    assert book.workers[7].task == (40, 1)
    book.start_round(3.0)
    book.replies([Reply(7, 40, 39, 0, {})])  # busy with it: nothing changes
    assert book.workers[7].task == (40, 1) and book.take_report(3.5).release == ()
    book.start_round(4.0)  # a later idle reply without its completion: lost, released
    book.replies([_idle(7, {0: 1.0}, last=39)])
    assert book.take_report(4.5).release == (40,)


def test_an_unanswered_assignment_is_kept_until_the_workers_next_reply_tells() -> None:
    """No answer to an assignment: the worker may have it.  Not released (it could run twice)
    until a reply to a later TaskList says the worker is idle without it."""
    book = _book()
    book.join(7, A, now=0.0)
    book.join(8, ("10.0.0.3", 4000), now=0.0)
    book.start_round(1.0)
    book.assigned([(40, 7, 1), (41, 8, 1)], delivering=True)
    book.start_round(2.0)
    book.unanswered(7)
    book.unanswered(8)
    book.replies([_idle(7, last=39), _idle(8, last=39)])  # this round's: may predate it
    assert book.take_report(2.5).release == ()
    book.start_round(3.0)
    book.replies([Reply(7, 40, 39, 0, {}), _idle(8, {0: 1.0}, last=39)])
    assert book.workers[7].task == (40, 1)  # it had it: kept
    assert book.take_report(3.5).release == (41,)  # 8 had not: released
    assert book.workers[8].task is None


def test_an_idle_site_polls_less_while_the_task_queue_has_nothing_for_it() -> None:
    # period 2 s, heartbeat 30 s, idle_max 10 s: 2, 4, 8, then 10 s between idle rounds.
    book = RoundBook(1, window=0.2, period=2.0, heartbeat=30.0, idle_max=10.0)
    waits = []
    now = 0.0
    for _ in range(5):
        book.supply(0)  # an empty answer
        waits.append(book.idle_period)
        now += book.idle_period
        assert not book.round_due(now - 0.01) and book.round_due(now)
        book.start_round(now)
    assert waits == [4.0, 8.0, 10.0, 10.0, 10.0]
    book.join(7, A, now=now + 1.0)  # an event still makes a round after the window
    assert book.round_due(now + 1.2)
    book.supply(3)  # work again: back to the period
    assert book.idle_period == 2.0
    short = RoundBook(1, window=0.2, period=1.0, heartbeat=1.5)
    short.supply(0)
    short.supply(0)
    assert short.idle_period == 1.5  # never beyond the heartbeat (the workers' silence)


def test_a_long_polling_master_whose_site_went_idle_waits_at_the_task_queue_at_once() -> None:
    # The site's last worker finished and the call that carried it found nothing runnable: the
    # next round comes after the period and its sync waits at the Task Queue, so a workflow
    # submitted meanwhile reaches the site at once (not after a doubled idle period).
    book = RoundBook(1, window=0.2, period=1.0, heartbeat=20.0, idle_max=10.0, long_poll=True)
    book.join(7, A, now=0.0)
    book.join(8, A, now=0.0)
    book.start_round(0.5)
    for _ in range(3):
        book.supply(0)  # empty answers to calls that were no polls (they carried completions)
        assert book.idle_period == 1.0 and book.poll_wait() == 40.0
    book.supply(0, polled=True)  # an empty poll: the rounds slow down as before
    book.supply(0, polled=True)
    assert book.idle_period == 4.0
    book.supply(2)  # work again
    book.supply(0)
    assert book.idle_period == 1.0
    # A busy worker: its completion will bring a round; the dry site's idle rounds (a TaskList
    # to every worker each) slow down as without the long poll.
    book.assigned([(40, 7, 1)])
    assert book.idle_period == 2.0
    book.supply(0)
    assert book.idle_period == 4.0
    plain = RoundBook(1, window=0.2, period=1.0, heartbeat=20.0, idle_max=10.0)
    plain.join(7, A, now=0.0)
    plain.supply(0)
    plain.supply(0)
    assert plain.idle_period == 4.0  # a master that does not long-poll polls less instead


def _dry_book() -> RoundBook:
    book = _book()
    book.join(7, A, now=0.0)
    book.join(8, A, now=0.0)
    book.start_round(0.3)
    book.take_report(0.3)
    book.reported()
    book.supply(0)  # the Task Queue: nothing runnable for the site
    book.assigned([(40, 7, 1), (41, 8, 1)])
    return book


def test_a_quiet_completion_at_a_dry_site_waits_for_the_next_call() -> None:
    book = _dry_book()
    assert book.dry
    assert book.completed(7, (40, 1), "c40", now=1.0, quiet=True)
    assert book.deferred((40, 1))
    assert not book.call_due(1.0) and book.first_event is None  # no round, no call of its own
    assert book.completed(8, (41, 1), "c41", now=1.1)  # not quiet: a round
    assert not book.deferred((41, 1)) and book.first_event == 1.1
    report = book.take_report(1.4)  # the round's sync carries both
    assert [c for _, c in report.completions] == ["c40", "c41"]
    assert not book.deferred((40, 1))


def test_a_quiet_completion_is_not_deferred_while_tasks_are_runnable() -> None:
    book = _dry_book()
    book.supply(3)
    assert not book.dry
    book.completed(7, (40, 1), "c40", now=1.0, quiet=True)
    assert not book.deferred((40, 1)) and book.first_event == 1.0


def test_a_dry_site_long_polls_unless_it_owes_the_task_queue_something() -> None:
    book = _dry_book()
    poll = POLL_BEATS * book.heartbeat
    assert book.poll_wait() == poll  # busy workers' completions end it when they come
    book.completed(7, (40, 1), "c40", now=1.0, quiet=True)
    assert book.poll_wait() == poll  # a quiet completion rides the poll
    book.completed(8, (41, 1), "c41", now=1.1)
    assert book.poll_wait() == 0.0  # a completion that needs a round: no waiting
    book.take_report(1.3)
    assert book.poll_wait() == 0.0  # in flight until the call answers
    book.reported()
    book.supply(2)
    assert book.poll_wait() == 0.0  # tasks runnable: nothing to wait for


def test_the_last_busy_workers_quiet_completion_is_reported_at_once() -> None:
    """Nothing else runs at the site: no completion can come to batch with it (the workflow's
    end would wait for nothing)."""
    book = _dry_book()
    book.completed(7, (40, 1), "c40", now=1.0, quiet=True)
    assert book.deferred((40, 1))
    book.completed(8, (41, 1), "c41", now=1.5, quiet=True)
    assert not book.deferred((41, 1)) and book.first_event == 1.5


def test_successors_left_to_the_task_queue_make_the_site_wet_and_bring_a_round() -> None:
    book = _dry_book()
    book.completed(7, (40, 1), "c40", now=1.0)
    book.start_round(1.2)
    book.leftover(0, 1.3)
    assert book.dry and book.first_event is None
    book.leftover(1, 1.3)  # worker 7 is idle: the leftover is offered to it soon
    assert not book.dry and book.first_event == 1.3
    assert book.poll_wait() == 0.0


def test_candidates_without_some_pilots_keep_their_truncation_marks() -> None:
    found = Candidates((7, 8, 9), ({0: 1.0}, {1: 1.0}, {0: 0.5}), (1, 2))
    rest = found.without({8})
    assert rest.pilots == (7, 9) and rest.ranks == ({0: 1.0}, {0: 0.5})
    assert rest.truncated == (1,)  # 9, now the second column
    assert found.without(()) == found


def test_a_round_that_placed_every_runnable_task_leaves_the_site_dry() -> None:
    """The Task Queue counted 3 runnable tasks: once rounds placed them all, the next round
    long-polls (no sync to learn that nothing is left)."""
    book = RoundBook(1, window=0.2, period=2.0, heartbeat=3.0, long_poll=True)
    book.join(7, A, now=0.0)
    book.join(8, A, now=0.0)
    book.start_round(0.5)
    book.supply(3)
    book.assigned([(40, 7, 1)])
    book.took(1, 0.6)  # two left, worker 8 waits: the next round at once
    assert not book.dry and book.poll_wait() == 0.0 and book.round_due(0.8)
    book.start_round(0.8)
    book.assigned([(41, 8, 1)])
    book.took(1, 0.9)  # one left, nobody waits: the period
    assert not book.round_due(1.2) and not book.dry
    book.took(1, 1.0)  # none left
    assert book.dry and book.poll_wait() == POLL_BEATS * book.heartbeat
    book.took(0, 1.1)  # a round that placed nothing changes nothing
    assert book.dry and not book.round_due(1.3)
    book.supply(1)
    assert not book.dry


def test_a_long_poll_never_asks_beyond_the_task_queues_cap() -> None:
    """Two heartbeats of a two-minute master timeout (80 s) would be refused (the Task Queue
    holds a call 60 s at most): the poll asks for the cap."""
    book = RoundBook(1, window=0.2, period=2.0, heartbeat=40.0, long_poll=True)
    book.join(7, A, now=0.0)
    book.supply(0)
    assert book.poll_wait() == POLL_MAX == MAX_WAIT  # the Task Queue's own cap


def test_a_late_hello_naming_a_finished_task_changes_no_belief() -> None:
    """Messages cross: a hello sent while the worker ran task 3 arrives after 3's completion
    and after the master gave the worker task 4: the master still believes task 4."""
    book = RoundBook(1, window=0.1, period=1.0, heartbeat=5.0, now=0.0)
    book.join(4, ("h", 4), 0.0, (3, 1))
    book.completed(4, (3, 1), object(), 1.0)
    book.assigned([(4, 4, 1)])
    book.join(4, ("h", 4), 2.0, (3, 1))  # the late hello
    assert book.workers[4].task == (4, 1)


def _counts_agree(book: RoundBook) -> None:
    idle = [w.pilot_id for w in book.workers.values() if w.task is None]  # by definition
    assert book.idle() == idle
    assert book.idle_count() == len(idle)
    assert book.any_idle() == bool(idle)


def test_the_idle_count_follows_every_change_of_a_workers_task() -> None:
    """``idle_count`` and ``any_idle`` (kept as tasks change, not by visiting every worker)
    agree with the list of idle workers through joins, assignments, completions, lost tasks,
    undelivered ones, byes and deaths."""
    book = _book()
    _counts_agree(book)
    for pilot in range(2, 8):
        book.join(pilot, A, now=0.0, task=(pilot * 10, 1) if pilot % 2 else None)
        _counts_agree(book)
    assert book.idle_count() == 3  # 2, 4, 6
    book.assigned([(20, 2, 1), (40, 4, 1)])
    _counts_agree(book)
    assert book.idle() == [6]
    book.completed(3, (30, 1), "c", now=1.0)  # its task: idle again
    _counts_agree(book)
    book.completed(5, (99, 1), "c", now=1.0)  # not its task: still busy
    _counts_agree(book)
    assert sorted(book.idle()) == [3, 6]
    book.undelivered(20, 2)
    _counts_agree(book)
    book.start_round(2.0)
    book.replies([_idle(4, last=0), _idle(7, last=0)])  # 4 and 7 lost their tasks
    _counts_agree(book)
    assert sorted(book.idle()) == [2, 3, 4, 6, 7]
    book.join(6, A, now=3.0, task=(60, 1))  # a hello naming its task
    book.leave(5)
    book.dead(6)
    _counts_agree(book)
    assert sorted(book.idle()) == [2, 3, 4, 7] and book.idle_count() == 4
    book.assigned([(1, p, 1) for p in (2, 3, 4, 7)])
    _counts_agree(book)
    assert not book.any_idle()
