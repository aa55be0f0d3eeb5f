"""Who is a distributed site's master (Delgado Peris 2014 §III.B): the Task Queue's rule and a
worker's succession, driven synchronously."""

from __future__ import annotations

from glidein_ext.sched.election import Action, MasterView, Succession, arbitrate, lost_own_task

LIVE = {3, 5, 8, 13}


def test_the_lowest_live_pilot_gets_the_role_only_once_the_master_is_gone() -> None:
    assert not arbitrate(5, master=3, master_alive=True, live=LIVE).granted
    assert "alive" in arbitrate(5, master=3, master_alive=True, live=LIVE).reason
    # Master 3 silent: 5 is the lowest other live pilot.
    assert arbitrate(5, master=3, master_alive=False, live=LIVE).granted
    verdict = arbitrate(8, master=3, master_alive=False, live=LIVE)
    assert not verdict.granted and "pilot 5 has a lower id" in verdict.reason
    # 8 could not reach 5: it may take the role; pilots above it do not count.
    assert arbitrate(8, master=3, master_alive=False, live=LIVE, unreachable=[5, 13]).granted
    assert not arbitrate(13, master=3, master_alive=False, live=LIVE, unreachable=[5]).granted
    # No master at all (it left): the lowest live pilot.
    assert arbitrate(3, master=None, master_alive=False, live=LIVE).granted
    # Not a live pilot: never; the master itself calling: it keeps the role.
    assert not arbitrate(21, master=None, master_alive=False, live=LIVE).granted
    assert arbitrate(3, master=3, master_alive=False, live=LIVE).granted


def _worker(me: int, now: float = 0.0) -> Succession:
    return Succession(me, silence=3.0, stagger=2.0, patience=20.0, retry=1.0, now=now)


MASTER = MasterView(3, ("10.0.0.3", 4000), epoch=1)


def test_a_silent_master_is_probed_then_the_first_successor_claims_at_once() -> None:
    worker = _worker(5)
    worker.heard(MASTER, now=0.0, successors=[5, 8])
    assert worker.next_action(2.9) is Action.NONE
    assert worker.next_action(3.0) is Action.PROBE
    assert worker.next_action(3.1) is Action.NONE  # one probe at a time
    worker.probe_answered(3.2)
    assert worker.next_action(5.0) is Action.NONE
    assert worker.next_action(6.2) is Action.PROBE
    worker.probe_failed(6.5)
    assert worker.master_dead
    assert worker.next_action(6.5) is Action.CLAIM
    assert worker.next_action(7.0) is Action.NONE  # a refused claim is retried after ``retry``
    assert worker.next_action(7.5) is Action.CLAIM


def test_later_successors_wait_their_turn_and_others_wait_longer() -> None:
    second, outsider = _worker(8), _worker(13)
    for worker in (second, outsider):
        worker.heard(MASTER, now=0.0, successors=[5, 8])
        worker.probe_failed(10.0)
    assert second.next_action(11.9) is Action.NONE
    assert second.next_action(12.0) is Action.CLAIM  # second in the list: 1 x stagger
    assert outsider.next_action(29.9) is Action.NONE
    assert outsider.next_action(30.0) is Action.CLAIM  # not in the list: patience
    assert outsider.waiting_for(30.5) == 0.5


def test_a_new_masters_tasklist_ends_the_election_and_a_stale_one_is_ignored() -> None:
    worker = _worker(8)
    worker.heard(MASTER, now=0.0, successors=[5, 8])
    worker.probe_failed(4.0)
    new = MasterView(5, ("10.0.0.5", 4000), epoch=2)
    assert worker.heard(new, now=4.5, successors=[8, 13])
    assert not worker.master_dead
    assert worker.next_action(6.0) is Action.NONE
    assert not worker.heard(MASTER, now=6.0)  # the old master's late TaskList
    assert worker.master == new


def test_the_task_queue_names_the_master_or_leaves_the_election_going() -> None:
    worker = _worker(8)
    assert worker.master_dead  # no master known yet: the election is on
    worker.adopt(MASTER, now=1.0)
    assert not worker.master_dead and worker.master == MASTER
    worker.forget(2.0)  # the addressee said it is not the master any more
    assert worker.master_dead
    worker.granted(4, ("10.0.0.8", 4000), now=3.0)
    assert worker.is_master and worker.next_action(100.0) is Action.NONE


def test_a_pilot_that_never_heard_a_succession_list_claims_after_one_stagger() -> None:
    # It registered while no master was alive (or joined after the last TaskList): the patience
    # of an outsider (minutes) would leave the site masterless if the successors left too.
    newcomer = _worker(21, now=10.0)
    assert newcomer.next_action(11.9) is Action.NONE
    assert newcomer.next_action(12.0) is Action.CLAIM
    listed = _worker(21, now=10.0)
    listed.heard(MASTER, now=10.0, successors=[5, 8])
    listed.probe_failed(14.0)
    assert listed.next_action(16.0) is Action.NONE  # it knows the successors: patience
    assert listed.next_action(34.0) is Action.CLAIM


def test_a_leaving_masters_resignation_tells_the_order() -> None:
    worker = _worker(13)
    worker.adopt(MASTER, now=0.0)  # no TaskList heard yet
    worker.forget(5.0, successors=[8, 13])
    assert worker.successors == (8, 13)
    assert worker.next_action(6.9) is Action.NONE
    assert worker.next_action(7.0) is Action.CLAIM  # second in the list: one stagger
    first = _worker(8)
    first.heard(MASTER, now=0.0, successors=[5, 8])
    first.forget(5.0, successors=[8, 13])  # 5 left with the master
    assert first.next_action(5.0) is Action.CLAIM


def test_a_new_master_releases_a_task_listed_as_its_own_that_it_never_got() -> None:
    # Its hand-out failed, and the old master died before the release reached the Task Queue.
    assert lost_own_task(12, None, set()) == 12
    assert lost_own_task(12, 9, {9}) == 12  # it runs another one
    assert lost_own_task(12, 12, set()) is None  # it runs it: its completion will come
    assert lost_own_task(12, None, {12}) is None  # it ran it: the completion rides a sync
    assert lost_own_task(None, None, set()) is None
