"""A worker of a distributed site as a pure state machine (Delgado Peris 2014 §III.B-C): events
in, instructions out, no sockets, no sleeps, no clock but the one each event carries."""

from __future__ import annotations

from typing import Any

from glidein_ext.distributed import codec, machine
from glidein_ext.distributed import worker_state as ws
from glidein_ext.sched.election import MasterView
from glidein_ext.tq.client import pilotkeys
from glidein_ext.tq.client.protocol import Completion, SitePilot, TaskAssignment

KEY = bytes(range(32))
ME = 7
WALL = 1_000_000.0
M1 = MasterView(1, ("10.0.0.1", 4001), 1)
M2 = MasterView(2, ("10.0.0.2", 4002), 2)


def _worker(now: float = 0.0) -> ws.WorkerState:
    return ws.WorkerState(ME, KEY, ("10.0.0.7", 4007), silence=30.0, stagger=2.0, now=now)


def _task(task_id: int = 40, attempt: int = 1) -> TaskAssignment:
    return TaskAssignment(task_id, attempt, f"t{task_id}", "true", (), (), 60, 0)


def _sealed(message: Any, epoch: int, at: float = WALL) -> Any:
    return codec.seal_message(pilotkeys.epoch_key(KEY, epoch), message, ME, epoch, at)


def _arrive(w: ws.WorkerState, message: Any, epoch: int, now: float = 1.0) -> list[Any]:
    kind = codec.kind_of(message)
    return w.handle(ws.Arrived(now, kind, _sealed(message, epoch), WALL + now))


def _of(out: list[Any], kind: type) -> list[Any]:
    return [i for i in out if isinstance(i, kind)]


def _met(master: MasterView, resend: bool = True) -> ws.Meet:
    """The hello a ``Greeted`` answers."""
    return ws.Meet(master, codec.Hello(ME, ("10.0.0.7", 4007)), resend)


def _heard(w: ws.WorkerState, master: MasterView, now: float, room: bool = True) -> list[Any]:
    successors = ((1, ("10.0.0.1", 4001)), (2, ("10.0.0.2", 4002)), (ME, ("10.0.0.7", 4007)))
    return w.handle(ws.Heard(now, master, successors, room))


def test_a_new_master_is_met_and_an_idle_worker_ranks() -> None:
    w = _worker()
    out = _heard(w, M1, 1.0)
    assert _of(out, ws.Meet) == [ws.Meet(M1, codec.Hello(ME, ("10.0.0.7", 4007), 0, 0))]
    assert out[-1] == ws.Rank(0)
    out = _heard(w, M1, 2.0, room=False)  # same master: no hello again
    assert not _of(out, ws.Meet)
    assert out[-1] == ws.ReplyBusy(0, 0)  # idle, but its startd has no room


def test_an_assignment_runs_once_and_its_resend_is_answered() -> None:
    w = _worker()
    _heard(w, M1, 1.0)
    out = _arrive(w, codec.Assign(1, _task()), 1)
    assert _of(out, ws.Run) == [ws.Run(_task())]
    assert w.current == (40, 1)
    again = _arrive(w, codec.Assign(1, _task()), 1, now=2.0)
    assert not _of(again, ws.Run)  # a resend of the same task: acknowledged, not run twice
    other = _arrive(w, codec.Assign(1, _task(41)), 1, now=3.0)
    assert not _of(other, ws.Run)  # busy with another task
    assert _heard(w, M1, 4.0)[-1] == ws.ReplyBusy(40, 0)


def test_a_completion_is_reported_until_a_master_holds_it_and_kept_until_synced() -> None:
    w = _worker()
    _heard(w, M1, 1.0)
    _arrive(w, codec.Assign(1, _task()), 1)
    done = Completion(40, 1, 0)
    out = w.handle(ws.Ended(5.0, done))
    assert out == [ws.SendDone(M1, codec.Done(ME, done))]
    assert _of(out, ws.SendDone)[0].key == (40, 1)  # its answer is fed back with the key
    w.handle(ws.Acked(5.1, (40, 1), ws.NO_ANSWER))
    assert not w.acknowledged((40, 1))  # no answer: the pilot's thread tries again
    w.handle(ws.Acked(5.2, (40, 1), True))  # the master holds it
    assert w.acknowledged((40, 1))
    w.finish((40, 1))
    assert (w.current, w.last_done) == (None, 40)
    assert len(w.outbox) == 1  # until a master says the Task Queue has it
    # A new master gets every completion no master synced, once it answered the hello.
    out = _heard(w, M2, 6.0)
    meet = _of(out, ws.Meet)[0]
    resent = w.handle(ws.Greeted(6.1, meet, [2]))
    assert resent == [ws.SendDone(M2, codec.Done(ME, done))]
    w.handle(ws.Acked(6.2, (40, 1), codec.DONE_SYNCED))
    assert len(w.outbox) == 0
    # A late resend of the finished assignment is acknowledged, never run again.
    assert not _of(_arrive(w, codec.Assign(2, _task()), 2, now=7.0), ws.Run)


def test_an_end_is_checked_with_the_task_queue_before_the_pilot_leaves() -> None:
    w = _worker()
    _heard(w, M1, 1.0)
    out = _arrive(w, codec.End("the Task Queue no longer has this pilot"), 1)
    assert _of(out, ws.CheckEnd) == [ws.CheckEnd(1, "the Task Queue no longer has this pilot")]
    assert not _of(out, ws.Leave)
    still = w.handle(ws.EndChecked(2.0, ws.CheckEnd(1, "x"), False))
    assert not _of(still, ws.Leave)  # the Task Queue still has it: not obeyed
    gone = w.handle(ws.EndChecked(3.0, ws.CheckEnd(1, "revoked"), True))
    assert _of(gone, ws.Leave) == [ws.Leave("revoked")]


def test_no_pilot_obeys_a_master_of_an_older_epoch() -> None:
    """The master of epoch 1 keeps its workers' epoch-1 keys after a takeover: its ``end`` and
    its assignments to a worker that heard epoch 2 are refused at the door, unchecked, unrun."""
    w = _worker()
    _heard(w, M1, 1.0)
    _heard(w, M2, 2.0)
    for message in (codec.End("stop"), codec.Assign(1, _task())):
        out = _arrive(w, message, 1, now=3.0)
        assert out[0] == machine.Answer(False)
        assert not _of(out, ws.CheckEnd) and not _of(out, ws.Run)
        assert "epoch 1" in _of(out, machine.Log)[0].message
    assert _heard(w, M1, 4.0) == [machine.Answer(None)]  # its TaskList too


def test_a_master_pilot_runs_no_task_and_hands_its_completion_to_its_own_role() -> None:
    w = _worker()
    _heard(w, M1, 1.0)
    _arrive(w, codec.Assign(1, _task()), 1)
    done = Completion(40, 1, 0)
    w.handle(ws.Ended(2.0, done))  # sent, not yet acknowledged; then the master dies
    pilots = [SitePilot(ME, "10.0.0.7:4007", 40, 1, ""), SitePilot(3, "h:1", None, None, "")]
    out = w.handle(ws.ClaimAnswered(40.0, True, MasterView(ME, ("10.0.0.7", 4007), 2), pilots))
    become = _of(out, ws.BecomeMaster)[0]
    assert (become.epoch, become.lost) == (2, None)  # its task is reported, not lost
    assert become.unsynced == (((40, 1), done),)
    assert w.acknowledged((40, 1))  # the role holds it now
    w.finish((40, 1))
    assert _heard(w, M2, 41.0)[-1] == ws.ReplyBusy(-1, 40)  # no rank from a master
    assert not _of(_arrive(w, codec.Assign(2, _task(41)), 2, now=42.0), ws.Run)
    own = w.handle(ws.Ended(43.0, Completion(42, 1, 0)))
    assert own == [ws.OwnDone(Completion(42, 1, 0))]
    # An end of the master of epoch 1, sent to the new master: refused.
    assert _arrive(w, codec.End("stop"), 1, now=44.0)[0] == machine.Answer(False)


def test_a_new_master_releases_the_task_the_task_queue_lists_as_its_own_but_it_never_got() -> None:
    w = _worker()
    pilots = [SitePilot(ME, "10.0.0.7:4007", 55, 1, "")]
    become = _of(w.granted(3, pilots, 1.0), ws.BecomeMaster)[0]
    assert become.lost == 55


def test_the_election_probes_a_silent_master_then_the_successors_claim_in_turn() -> None:
    w = _worker()
    _heard(w, M1, 1.0)  # successors 1, 2, 7
    assert w.handle(machine.Tick(10.0)) == []
    probe = machine.Probe(M1.pilot_id, M1.address)
    assert w.handle(machine.Tick(31.0)) == [probe]
    assert w.handle(machine.Tick(31.5)) == []  # one probe at a time
    out = w.handle(machine.ProbeEnded(32.0, M1.pilot_id, True))
    assert _of(out, ws.Meet) and not _of(out, ws.Meet)[0].resend  # alive: hello again
    assert w.handle(machine.Tick(62.5)) == [probe]
    w.handle(machine.ProbeEnded(63.0, M1.pilot_id, False))
    # Third in the list: it waits two staggers for pilots 1 and 2 to claim first.
    assert w.handle(machine.Tick(65.0)) == []
    claim = w.handle(machine.Tick(67.0))
    assert claim == [ws.Claim(((1, ("10.0.0.1", 4001)), (2, ("10.0.0.2", 4002))))]
    # Refused: another took the role; it is met.
    out = w.handle(ws.ClaimAnswered(67.5, False, M2, ()))
    assert _of(out, ws.Meet)[0].master == M2
    lost = w.handle(ws.ClaimAnswered(68.0, False, None, (), lost="the Task Queue forgot it"))
    assert lost == [ws.Leave("the Task Queue forgot it")]


def test_a_resigning_master_starts_the_election_at_once() -> None:
    w = _worker()
    _heard(w, M1, 1.0)
    out = _arrive(w, codec.Resign(((ME, ("10.0.0.7", 4007)),)), 1, now=2.0)
    assert isinstance(out[0].value, list)  # a sealed answer
    assert w.handle(machine.Tick(2.1)) == [ws.Claim(())]  # first in the new list: no wait


def test_an_evicted_task_leaves_the_worker_idle_without_a_report() -> None:
    w = _worker()
    _heard(w, M1, 1.0)
    _arrive(w, codec.Assign(1, _task()), 1)
    w.handle(ws.GaveBack(2.0, (40, 1)))
    assert w.current is None and len(w.outbox) == 0
    assert _heard(w, M1, 3.0)[-1] == ws.Rank(0)


def test_a_master_that_says_it_is_none_is_forgotten() -> None:
    w = _worker()
    _heard(w, M1, 1.0)
    w.handle(ws.Greeted(1.5, _met(M1), None))
    assert w.succession.master_dead


def test_a_worker_greets_its_master_again_until_a_hello_is_answered() -> None:
    """A master ignores the replies of a pilot it never met: a lost hello is sent again."""
    w = _worker()
    assert _of(_heard(w, M1, 1.0), ws.Meet)  # its hello is lost: no Greeted comes
    assert not _of(_heard(w, M1, 2.0), ws.Meet)  # not at every TaskList
    again = _of(_heard(w, M1, 1.0 + ws.RESEND_AFTER), ws.Meet)
    assert again and again[0].master == M1
    w.handle(ws.Greeted(5.0, _met(M1), [1]))
    assert not _of(_heard(w, M1, 5.0 + ws.RESEND_AFTER), ws.Meet)


def test_a_worker_a_master_holds_for_a_key_asks_the_task_queue_about_itself() -> None:
    """A master gets no key for a pilot the Task Queue no longer has (its ``end`` may be lost):
    hellos or completions held 'pending' too often, and the pilot asks the Task Queue."""
    w = _worker()
    _heard(w, M1, 1.0)
    checks = []
    for i in range(ws.PENDING_CHECK):
        checks += _of(w.handle(ws.Greeted(2.0 + i, _met(M1, False), codec.PENDING)), ws.CheckEnd)
    assert checks == [ws.CheckEnd(1, "the master has no key for this pilot")]
    w.handle(ws.Acked(9.0, (40, 1), codec.PENDING))
    w.handle(ws.Acked(9.1, (40, 1), codec.PENDING))
    assert _of(w.handle(ws.Acked(9.2, (40, 1), codec.PENDING)), ws.CheckEnd)


def test_an_unanswered_check_is_asked_again() -> None:
    w = _worker()
    _heard(w, M1, 1.0)
    w.handle(ws.EndChecked(2.0, ws.CheckEnd(1, "stop"), None))  # the Task Queue did not answer
    assert w.next_tick(2.0) <= ws.RESEND_AFTER
    assert w.handle(machine.Tick(2.0 + ws.RESEND_AFTER)) == [ws.CheckEnd(1, "stop")]


def test_one_claim_at_a_time() -> None:
    w = _worker()
    _heard(w, M1, 1.0)
    w.handle(machine.ProbeEnded(40.0, M1.pilot_id, False))
    assert _of(w.handle(machine.Tick(50.0)), ws.Claim)
    assert w.handle(machine.Tick(60.0)) == []  # its answer has not come
    w.handle(ws.ClaimAnswered(61.0, False, None, ()))  # the call failed
    assert _of(w.handle(machine.Tick(62.0)), ws.Claim)


def test_an_idle_worker_given_nothing_greets_its_master_again_once_a_silence() -> None:
    """A master that found a slow worker dead, or lost its key, ignores its replies; the worker
    says hello again rather than idle unseen for ever."""
    w = _worker()
    _heard(w, M1, 1.0)
    w.handle(ws.Greeted(1.1, _met(M1), [1]))
    assert not _of(_heard(w, M1, 2.0), ws.Meet)
    assert not _of(_heard(w, M1, 2.0 + w.silence - 1), ws.Meet)
    assert _of(_heard(w, M1, 2.0 + w.silence), ws.Meet)
