"""The master's rounds as a pure state machine (Delgado Peris 2014 §III.B-C), driven here
synchronously: events in with an explicit ``now``, instructions out; no sockets, no sleeps, no
event loop.  A small in-memory site answers the Task Queue calls and the broadcasts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from glidein_ext.distributed import codec as messages
from glidein_ext.distributed import machine
from glidein_ext.distributed import master_state as ms
from glidein_ext.sched.assign import assign
from glidein_ext.sched.ranking import Ranking
from glidein_ext.sched.tasklist import encode_reply
from glidein_ext.tq.client import pilotkeys
from glidein_ext.tq.client.protocol import Completion, PilotKey, SitePilot, TaskOffer

SITE = "T2_XX_Test"
EPOCH = 3
WALL = 1_000_000.0  # the wall clock the seals are made and checked with
InstructionT = TypeVar("InstructionT")


def key(pilot: int) -> bytes:
    return pilotkeys.epoch_key(pilotkeys.pilot_key(b"m" * 32, SITE, pilot), EPOCH)


def offer(task_id: int) -> TaskOffer:
    return TaskOffer(task_id, f"t{task_id}", "true", (), (), 60)


def pilot(p: int, task: int | None = None, with_key: bool = True) -> SitePilot:
    return SitePilot(
        p, f"127.0.0.1:{4000 + p}", task, 1 if task else None, key(p).hex() if with_key else None
    )


def core(**settings: Any) -> ms.MasterState[TaskOffer]:
    values: dict[str, Any] = {"window": 0.1, "period": 1.0, "heartbeat": 5.0, "now": 0.0}
    values.update(settings)
    return ms.MasterState(1, EPOCH, entry=ms.entry_of, address=("127.0.0.1", 4001), **values)


def of(out: Sequence[ms.Instruction], kind: type[InstructionT]) -> list[InstructionT]:
    return [i for i in out if isinstance(i, kind)]


def first_sync(state: ms.MasterState[TaskOffer], *early: ms.Event) -> ms.CallSync:
    """Pilot 7 installed, then ``early``, the role started: the first round's sync."""
    state.handle(ms.Installed(0.0, (pilot(7),)))
    for event in early:
        state.handle(event)
    state.handle(ms.Started(0.0))
    (sync,) = of(state.handle(machine.Tick(0.1)), ms.CallSync)
    return sync


def sealed(p: int, kind: str, body: Any) -> Any:
    return messages.seal(key(p), kind, p, EPOCH, body, WALL)


class Site:
    """The Task Queue and the workers, in memory: ``offers`` runnable tasks (``queued`` in all),
    each worker in ``ranks`` idle and ranking the TaskList so, the others silent."""

    def __init__(self, state: ms.MasterState[TaskOffer]) -> None:
        self.state = state
        self.offers: list[int] = []
        self.queued = 0
        self.ranks: dict[int, dict[int, float]] = {}
        self.syncs: list[ms.CallSync] = []
        self.assigns: list[ms.CallAssign] = []
        self.delivered: list[ms.Deliver[TaskOffer]] = []
        self.out: list[ms.Instruction] = []

    def feed(
        self, event: ms.Event, answer: Callable[[ms.Instruction], bool] = lambda i: True
    ) -> None:
        """Feed ``event``, then answer every call and broadcast it leads to at the same time."""
        pending = list(self.state.handle(event))
        while pending:
            instruction = pending.pop(0)
            self.out.append(instruction)
            if not answer(instruction):
                continue
            reply = self._reply(instruction, event.now)
            if reply is not None:
                pending += self.state.handle(reply)

    def _reply(self, instruction: ms.Instruction, now: float) -> ms.Event | None:
        if isinstance(instruction, ms.CallSync):
            self.syncs.append(instruction)
            offers = tuple(offer(t) for t in self.offers[: instruction.want])
            return ms.SyncAnswered(now, instruction.call, offers, self.queued)
        if isinstance(instruction, ms.Broadcast):
            replies: list[Any] = []
            for p, ranks in self.ranks.items():
                replies += encode_reply(p, 0, 0, Ranking(ranks, len(ranks)))
            return ms.BroadcastEnded(now, replies, 0.01, True)
        if isinstance(instruction, ms.Solve):
            return ms.Solved(now, assign(instruction.matrix, "greedy"))
        if isinstance(instruction, ms.CallAssign):
            self.assigns.append(instruction)
            accepted: tuple[ms.Accepted[TaskOffer], ...] = tuple(
                ms.Accepted(p.task_id, p.pilot_id, 1) for p in instruction.pairs
            )
            for item in accepted:
                self.offers.remove(item.task_id)
                self.queued -= 1
            return ms.AssignAnswered(now, instruction.call, accepted)
        if isinstance(instruction, ms.Deliver):
            self.delivered.append(instruction)
            return ms.HandOutEnded(now, instruction.handout, ms.HandOut.TAKEN)
        return None


def test_a_round_goes_from_its_sync_to_the_hand_outs() -> None:
    state = core()
    site = Site(state)
    site.feed(ms.Installed(0.0, (pilot(7), pilot(8))))
    out = state.handle(ms.Started(0.0))
    assert out == [ms.ArmTimer(0.1)]  # the hellos' batching window
    site.offers, site.queued = [40, 41], 2
    site.ranks = {7: {0: 1.0, 1: 0.5}, 8: {0: 0.5, 1: 1.0}}
    site.feed(machine.Tick(0.1))
    (sync,) = site.syncs
    assert sync.want == 8 and sync.wait == 0.0  # four offers per idle worker
    assert [(p.task_id, p.pilot_id) for p in site.assigns[0].pairs] == [(40, 7), (41, 8)]
    delivered = sorted((d.pilot_id, d.offer.task_id, d.key) for d in site.delivered)
    assert delivered == [(7, 40, key(7)), (8, 41, key(8))]  # sealed with each one's key
    assert {p: w.task for p, w in state.book.workers.items()} == {7: (40, 1), 8: (41, 1)}
    assert not any(w.delivering for w in state.book.workers.values())
    assert state.phases.rounds == 1 and state.rank_sums == [2.0]
    assert not state.handouts


def test_a_dry_site_long_polls_and_an_event_gives_the_poll_up() -> None:
    state = core()
    site = Site(state)
    site.feed(ms.Installed(0.0, (pilot(7),)))
    site.feed(ms.Started(0.0))
    site.feed(machine.Tick(0.1))  # a round: nothing runnable, the site is dry
    assert [s.wait for s in site.syncs] == [0.0]
    site.feed(machine.Tick(2.0), answer=lambda i: not (isinstance(i, ms.CallSync) and i.wait))
    poll = site.out[-1]
    assert isinstance(poll, ms.CallSync) and poll.wait == 10.0  # two heartbeats at the Task Queue
    out = state.handle(ms.LocalDone(3.0, 1, Completion(41, 1, 0)))  # the master's own task
    assert out == [ms.ArmTimer(3.1)]  # the poll is given up: a round carries the completion
    assert state.handle(ms.SyncAnswered(4.0, poll.call)) == []  # its late answer changes nothing
    site.feed(machine.Tick(3.1))
    waits = [s.wait for s in site.syncs]
    assert waits == [0.0, 0.0]
    assert [c.task_id for _, c in site.syncs[-1].report.completions] == [41]


def test_completions_ride_the_next_call_and_are_then_synced() -> None:
    state = core()
    site = Site(state)
    site.feed(ms.Installed(0.0, (pilot(7, task=40),)))
    site.feed(ms.Started(0.0))
    site.feed(machine.Tick(0.1))  # worker 7 runs task 40: a round without a sync
    assert site.syncs == []
    body = messages.encode(messages.Done(7, Completion(40, 1, 0)))
    payload = sealed(7, messages.DONE, body)
    out = state.handle(ms.MessageArrived(1.0, WALL, messages.DONE, payload))
    (answer,) = of(out, machine.Answer)
    assert messages.open_answer(key(7), messages.DONE, payload[2], answer.value) is True  # held
    # Its only worker is free: no completion is left to batch with, so the round comes at once,
    # without the batching window, and its sync carries the completion.
    assert not of(out, ms.ArmTimer)
    (sync,) = of(out, ms.CallSync)
    assert state.book.pending() and state.busy()
    site.syncs.append(sync)
    site.feed(ms.SyncAnswered(1.0, sync.call))
    site.feed(machine.Tick(2.2))
    carried = [[c.task_id for _, c in s.report.completions] for s in site.syncs]
    assert carried[0] == [40] and [40] not in carried[1:]  # once
    assert state.book.synced((40, 1)) and not state.book.pending()
    again = sealed(7, messages.DONE, body)  # the worker resends it: the Task Queue has it
    (answer,) = of(state.handle(ms.MessageArrived(2.0, WALL, messages.DONE, again)), machine.Answer)
    assert messages.open_answer(key(7), messages.DONE, again[2], answer.value) == "synced"


def test_a_stale_answer_steps_the_master_down() -> None:
    state = core()
    sync = first_sync(state)
    out = state.handle(ms.CallFailed(0.2, sync.call, ms.Failure.STALE, "pilot 2 is the master"))
    assert out == [ms.StepDown("pilot 2 is the master"), ms.Finished(False)]
    assert not state.active
    assert state.handle(machine.Tick(5.0)) == []  # the role is over
    body = messages.encode(messages.Hello(7, ("127.0.0.1", 4007)))
    out = state.handle(
        ms.MessageArrived(5.0, WALL, messages.HELLO, sealed(7, messages.HELLO, body))
    )
    assert out == [machine.Answer(None)]


def test_a_refused_credential_ends_the_role() -> None:
    state = core()
    sync = first_sync(state)
    out = state.handle(ms.CallFailed(0.2, sync.call, ms.Failure.REFUSED, "revoked"))
    (down,) = of(out, ms.StepDown)
    assert down.reason == "the Task Queue refuses this pilot: revoked"
    assert of(out, ms.Finished) == [ms.Finished(False)] and not state.active


def test_an_error_keeps_the_report_for_the_next_call() -> None:
    state = core()
    sync = first_sync(state, ms.LocalDone(0.0, 1, Completion(41, 1, 0)))
    assert [c.task_id for _, c in sync.report.completions] == [41]
    state.handle(ms.CallFailed(0.2, sync.call, ms.Failure.ERROR, "away"))
    assert [c.task_id for _, c in [(p, c) for _, p, c in state.book.pending()]] == [41]


def test_a_done_before_its_senders_key_is_held_then_admitted() -> None:
    state = core()
    site = Site(state)
    site.feed(ms.Installed(0.0, (pilot(7), pilot(9, task=109, with_key=False))))
    site.feed(ms.Started(0.0))
    body = messages.encode(messages.Done(9, Completion(109, 1, 0)))
    out = state.handle(ms.MessageArrived(1.0, WALL, messages.DONE, sealed(9, messages.DONE, body)))
    assert of(out, machine.Answer) == [machine.Answer(messages.PENDING)]
    assert 9 in state.held and state.busy() and not state.book.pending()
    (sync,) = of(out, ms.CallSync)  # a round is due: its sync
    assert 9 in sync.pilots  # the sync asks for its key
    state.handle(ms.SyncAnswered(1.2, sync.call, keys=(PilotKey(9, key(9).hex()),), wall=WALL))
    assert state.held == {}
    assert [(p, c.task_id) for _, p, c in state.book.pending()] == [(9, 109)]


def test_a_forged_held_message_is_refused_once_the_key_comes() -> None:
    state = core()
    state.handle(ms.Installed(0.0, (pilot(9, task=109, with_key=False),)))
    state.handle(ms.Started(0.0))
    body = messages.encode(messages.Done(9, Completion(109, 1, 0)))
    forged = messages.seal(key(7), messages.DONE, 9, EPOCH, body, WALL)
    out = state.handle(ms.MessageArrived(1.0, WALL, messages.DONE, forged))
    assert of(out, machine.Answer) == [machine.Answer(messages.PENDING)]
    (sync,) = of(out, ms.CallSync)
    state.handle(ms.SyncAnswered(1.2, sync.call, keys=(PilotKey(9, key(9).hex()),), wall=WALL))
    assert state.held == {} and not state.book.pending()


def test_a_dead_worker_is_reported_in_the_next_sync() -> None:
    """Missed rounds make a suspect; a failed probe makes it dead once unheard for the grace."""
    state = core(grace=100.0)
    site = Site(state)
    site.feed(ms.Installed(0.0, (pilot(7), pilot(8))))
    site.feed(ms.Started(0.0))
    site.ranks = {7: {}}  # worker 8 is silent
    for now in (0.1, 20.1, 40.1):  # three rounds missed
        site.feed(machine.Tick(now))
    assert of(site.out, machine.Probe) == [machine.Probe(8, ("127.0.0.1", 4008))]
    out = state.handle(machine.ProbeEnded(41.0, 8, False))
    assert 8 in state.book.workers and not of(out, ms.Send)  # within the grace: a suspect
    site.out.clear()
    site.feed(machine.Tick(60.1))
    assert of(site.out, machine.Probe) == [machine.Probe(8, ("127.0.0.1", 4008))]  # again
    site.out.clear()
    site.feed(machine.ProbeEnded(101.0, 8, False))
    reason = "the Task Queue no longer has this pilot"
    end = ms.Send(8, ("127.0.0.1", 4008), key(8), messages.End(reason))
    assert of(site.out, ms.Send) == [end]
    assert 8 not in state.book.workers
    assert site.syncs[-1].report.dead == (8,)  # the next call says so


def test_close_makes_a_last_sync_then_resigns() -> None:
    state = core()
    site = Site(state)
    site.feed(ms.Installed(0.0, (pilot(7), pilot(8))))
    site.feed(ms.Started(0.0))
    site.feed(machine.Tick(0.1))
    state.handle(ms.LocalDone(1.0, 1, Completion(41, 1, 0)))
    out = state.handle(ms.Close(1.0))
    (last,) = of(out, ms.CallSync)
    assert last.want == 0 and [c.task_id for _, c in last.report.completions] == [41]
    out = state.handle(ms.CallFailed(1.1, last.call, ms.Failure.ERROR, "away"))
    assert out == [ms.ArmTimer(1.6)]  # tried again half a second later
    (last,) = of(state.handle(machine.Tick(1.6)), ms.CallSync)
    assert [c.task_id for _, c in last.report.completions] == [41]
    out = state.handle(ms.SyncAnswered(1.7, last.call))
    resigns = of(out, ms.Send)
    assert [(r.pilot_id, r.key) for r in resigns] == [(7, key(7)), (8, key(8))]
    successors = ((7, ("127.0.0.1", 4007)), (8, ("127.0.0.1", 4008)))
    assert [r.message for r in resigns] == [messages.Resign(successors)] * 2
    assert out[-1] == ms.Finished(True) and not state.active and state.clean


def test_the_round_phases_ride_the_next_sync_that_gets_through() -> None:
    state = core()
    state.handle(ms.LocalDone(0.0, 1, Completion(41, 1, 0)))
    state.phases.timings = {"sync": 0.5, "solve": 0.25}
    state.phases.account(1, 0, 0, 0, 0)
    (first,) = of(state.handle(ms.Close(1.0)), ms.CallSync)
    assert dict(first.phases) == {"sync": 0.5, "solve": 0.25}
    state.handle(ms.CallFailed(1.1, first.call, ms.Failure.ERROR, "away"))  # kept
    state.phases.timings = {"sync": 0.5}
    state.phases.account(2, 0, 0, 0, 0)
    (second,) = of(state.handle(machine.Tick(1.6)), ms.CallSync)
    assert dict(second.phases) == {"sync": 1.0, "solve": 0.25}
    state.handle(ms.SyncAnswered(1.7, second.call))
    assert state.phases.unsent() == ()  # counted once


def test_busy_while_the_site_has_work() -> None:
    state = core()
    site = Site(state)
    site.feed(ms.Installed(0.0, (pilot(7), pilot(8))))
    assert not state.busy()  # nothing runs, nothing runnable known
    site.feed(ms.Started(0.0))
    site.offers, site.queued = [40], 3  # two more than offered: at another site's share
    site.ranks = {7: {0: 1.0}}
    site.feed(machine.Tick(0.1))
    assert state.busy()  # task 40 runs at worker 7, and two are runnable
    (sync,) = of(state.handle(ms.LocalDone(5.0, 7, Completion(40, 1, 0))), ms.CallSync)
    assert state.busy()  # the completion is not at the Task Queue yet
    state.handle(ms.SyncAnswered(5.1, sync.call, queued=0))
    assert not state.book.pending() and state.book.runnable == 0
    assert not state.busy()


def test_an_assign_whose_answer_was_lost_releases_its_tasks_in_the_next_sync() -> None:
    """The Task Queue may have placed the pairs before its answer was lost: the master would
    believe those pilots idle and the Task Queue busy, for ever.  Its next call is a sync that
    releases the tasks (a no-op for those it had not placed), before any round offers them."""
    state = core()
    site = Site(state)
    site.feed(ms.Installed(0.0, (pilot(7),)))
    site.feed(ms.Started(0.0))
    site.offers, site.queued = [40], 1
    site.ranks = {7: {0: 1.0}}
    site.feed(machine.Tick(0.1), answer=lambda i: not isinstance(i, ms.CallAssign))
    (assigned,) = [i for i in site.out if isinstance(i, ms.CallAssign)]
    out = state.handle(ms.CallFailed(0.2, assigned.call, ms.Failure.ERROR, "timed out"))
    site.out.clear()
    site.syncs.clear()
    for instruction in out:
        reply = site._reply(instruction, 0.2)
        if reply is not None:
            site.feed(reply)
    site.feed(machine.Tick(5.0))
    assert site.syncs, "the next step is a sync"
    assert site.syncs[0].report.release == (40,)
