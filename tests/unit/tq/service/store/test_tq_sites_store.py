"""The site DHT and the distributed architecture at the Task Queue (Delgado Peris 2014 §III), on
SQLite and PostgreSQL: joining answers, the master and its epoch, the master's bulk calls, the claim
rule, the site of produced files, and the counters they feed."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from glidein_ext.distributed import worker_state as ws
from glidein_ext.errors import StaleMasterError, TaskQueueRequestError
from glidein_ext.tq.client import pilotkeys
from glidein_ext.tq.client.protocol import (
    Claim,
    Completion,
    MasterInfo,
    Pair,
    PilotKey,
    RegisterAnswer,
    Registration,
    RoundReport,
    SiteAssign,
    SiteCompletion,
    SiteSync,
    TaskOffer,
)
from glidein_ext.tq.models import Architecture
from glidein_ext.tq.service import tables
from glidein_ext.tq.service.store import Store
from glidein_ext.tq.service.store.successors import MAX_SUCCESSORS
from glidein_ext.tq.workflow import generate, parse_workflow
from tests.support.clock import Clock


def _register(store: Store, n: int, site: str = "S", port: int = 4000) -> list[RegisterAnswer]:
    return [
        store.register(Registration(site=site, host=f"wn{i}", dht_address=f"10.0.0.{i}:{port}"))
        for i in range(n)
    ]


def _two_distributed_sites(store_for: Any) -> tuple[Clock, Store, MasterInfo, MasterInfo]:
    """Distributed sites S and T of 2 pilots each, and their masters."""
    clock = Clock()
    store = store_for(clock, default_architecture=Architecture.DISTRIBUTED)
    s_master, t_master = (
        _register(store, 2, site=s, port=p)[0].master for s, p in (("S", 4000), ("T", 5000))
    )
    assert s_master is not None and t_master is not None
    return clock, store, s_master, t_master


def _distributed_site_offered_w1(
    store_for: Any,
) -> tuple[Clock, Store, MasterInfo, tuple[TaskOffer, ...]]:
    """A distributed site of 4 pilots (pilot 1 its master) offered W1's 4 first tasks."""
    clock = Clock()
    store = store_for(clock, default_architecture=Architecture.DISTRIBUTED)
    answers = _register(store, 4)
    master = answers[0].master
    assert master is not None
    store.submit(parse_workflow(generate("w1", scale=4 / 80)))
    offers = store.sync("S", SiteSync(master.pilot_id, master.epoch, want=4)).tasks
    return clock, store, master, offers


def test_joining_answers_an_id_contacts_the_key_and_the_master(store_for: Any) -> None:
    store = store_for(Clock(), default_architecture=Architecture.DISTRIBUTED)
    first, second, third = _register(store, 3)
    other_site = store.register(Registration(site="T", host="x", dht_address="10.1.0.1:4000"))
    assert first.architecture == "distributed" and first.site_contacts == ()
    assert first.master is not None and first.master.pilot_id == first.pilot_id
    assert first.master.epoch == 1
    assert third.site_contacts == ("10.0.0.1:4000", "10.0.0.0:4000")  # newest first
    assert second.master == third.master == first.master
    assert first.site_key == third.site_key and len(first.site_key or "") == 64
    assert other_site.site_key != first.site_key  # one key per site
    ids = {a.dht_id for a in (first, second, third)}
    assert len(ids) == 3 and all(len(i or "") == 40 for i in ids)


def test_architectures_per_site_and_pre_dht_gets_no_dht(store_for: Any) -> None:
    store = store_for(
        Clock(),
        default_architecture=Architecture.PRE_DHT,
        architectures={"C": Architecture.CENTRALIZED},
    )
    (pre,) = _register(store, 1, site="P")
    (central,) = _register(store, 1, site="C")
    assert (pre.architecture, pre.site_key, pre.master) == ("pre-dht", None, None)
    assert central.architecture == "centralized" and central.site_key and central.master is None
    with pytest.raises(TaskQueueRequestError):
        store.claim_master("C", Claim(central.pilot_id))


def _run_w1(store: Store, clock: Clock, answers: list[RegisterAnswer]) -> None:
    """The master fetches, assigns and reports the workers' completions until W1 is done."""
    master = answers[0].master
    assert master is not None
    workers = [a.pilot_id for a in answers[1:]]
    pending: list[SiteCompletion] = []
    while True:
        clock.now += 1
        answer = store.sync("S", SiteSync(master.pilot_id, master.epoch, tuple(pending), want=8))
        assert all(r.accepted for r in answer.results)
        pending = []
        if not answer.tasks:
            return
        pairs = tuple(Pair(o.task_id, p) for o, p in zip(answer.tasks, workers, strict=False))
        placed = store.assign(
            "S", SiteAssign(master.pilot_id, master.epoch, pairs, RoundReport(2.0 * len(pairs)))
        ).accepted
        outputs = {o.task_id: o.outputs for o in answer.tasks}
        for p in placed:
            done = Completion(
                p.task_id, p.attempt, 0, outputs[p.task_id], "", clock.now, clock.now + 0.5
            )
            pending.append(SiteCompletion(p.pilot_id, done))


def test_the_master_runs_a_workflow_in_bulk_calls(store_for: Any) -> None:
    clock = Clock()
    store = store_for(clock, default_architecture=Architecture.DISTRIBUTED)
    answers = _register(store, 5)
    workflow = store.submit(parse_workflow(generate("w1", scale=8 / 80)))
    _run_w1(store, clock, answers)
    rows = store.task_rows()
    assert len(rows) == 16 and {r.state for r in rows} == {"done"}
    assert {r.attempt for r in rows} == {1}
    with store.engine.connect() as conn:
        sites = set(conn.execute(sa.select(tables.files.c.site)).scalars())
    assert sites == {"S"}  # where each output was produced
    counters = store.counters.snapshot(clock.now)
    (wf,) = counters["workflows"]
    assert wf["id"] == workflow and wf["tasks_done"] == 16 and wf["turnaround"] is not None
    assert wf["rounds"]["n"] >= 2 and wf["rounds"]["rank_sum"] > 0


def test_a_stale_master_is_refused_and_the_claim_rule_holds(store_for: Any) -> None:
    clock, store, master, offers = _distributed_site_offered_w1(store_for)
    placed = store.assign(
        "S", SiteAssign(master.pilot_id, master.epoch, (Pair(offers[0].task_id, 3),))
    ).accepted
    assert [(p.task_id, p.pilot_id) for p in placed] == [(offers[0].task_id, 3)]
    # Alive: nobody may take the role.
    assert not store.claim_master("S", Claim(2)).granted
    clock.now += 6  # the master timeout (5 s) passes without a call
    refused = store.claim_master("S", Claim(3))
    assert not refused.granted and "pilot 2 has a lower id" in refused.reason
    granted = store.claim_master("S", Claim(2))
    assert granted.granted and granted.master is not None and granted.master.epoch == 2
    assert {p.pilot_id: p.task_id for p in granted.pilots} == {
        2: None,  # the claimant too: a task listed as its own it never got is released
        3: offers[0].task_id,
        4: None,
    }
    # The old master is lost; its calls are refused, two masters never both assign.
    with pytest.raises(StaleMasterError):
        store.sync("S", SiteSync(master.pilot_id, master.epoch))
    with pytest.raises(StaleMasterError):
        store.assign("S", SiteAssign(master.pilot_id, master.epoch, (Pair(offers[1].task_id, 4),)))
    new = granted.master
    # The new master releases the task pilot 3 lost, reports pilot 4 dead.
    answer = store.sync("S", SiteSync(new.pilot_id, new.epoch, release=(offers[0].task_id,)))
    assert answer.queued == 4
    store.sync("S", SiteSync(new.pilot_id, new.epoch, dead=(4,)))
    assert store.status().pilots["S"] == {"idle": 2, "lost": 2}
    masters = store.counters.snapshot(clock.now)["masters"]["S"]
    assert [(m["pilot_id"], m["epoch"]) for m in masters] == [(1, 1), (2, 2)]


def test_a_task_placed_on_the_claimant_that_never_reached_it_is_released(
    store_for: Any,
) -> None:
    """The old master placed a task on pilot 2 and froze before handing it out; pilot 2 takes the
    role.  The claim's roster lists pilot 2 with that task, so the new master's own core finds it
    lost (it runs nothing) and its first sync requeues it: it is not left running for ever on a
    pilot that never got it (Delgado Peris 2014 §III.B, a new master inherits the roster)."""
    clock, store, master, offers = _distributed_site_offered_w1(store_for)
    task = offers[0].task_id
    assert store.assign("S", SiteAssign(master.pilot_id, master.epoch, (Pair(task, 2),))).accepted
    clock.now += 6  # the master freezes for the master timeout
    granted = store.claim_master("S", Claim(2))
    assert granted.granted and granted.master is not None
    worker = ws.WorkerState(2, b"\x02" * 32, ("10.0.0.2", 4000), silence=30.0, stagger=2.0)
    out = worker.granted(granted.master.epoch, granted.pilots, clock.now)
    (become,) = [i for i in out if isinstance(i, ws.BecomeMaster)]
    assert become.lost == task
    new = granted.master
    store.sync("S", SiteSync(new.pilot_id, new.epoch, release=(become.lost,)))
    row = next(r for r in store.task_rows() if r.id == task)
    assert (row.state, row.pilot_id) == ("queued", None)
    assert store.status().pilots["S"] == {"idle": 3, "lost": 1}


def test_a_claim_naming_busy_pilots_unreachable_ends_none_of_them(store_for: Any) -> None:
    """One pilot's word is no proof: only the Task Queue's own record (the old master silent for
    the master timeout) ends a pilot at a claim; the pilots the claimant says it could not reach
    keep their tasks (the new master's rounds confirm a death, with a probe)."""
    clock, store, master, offers = _distributed_site_offered_w1(store_for)
    pairs = (Pair(offers[0].task_id, 2), Pair(offers[1].task_id, 3))
    assert len(store.assign("S", SiteAssign(master.pilot_id, master.epoch, pairs)).accepted) == 2
    clock.now += 6  # the master falls silent for the master timeout
    granted = store.claim_master("S", Claim(4, unreachable=(2, 3)))
    assert granted.granted and granted.master is not None
    assert store.status().pilots["S"] == {"busy": 2, "idle": 1, "lost": 1}  # only the old master
    running = {r.id: (r.pilot_id, r.attempt) for r in store.task_rows() if r.state == "running"}
    assert running == {offers[0].task_id: (2, 1), offers[1].task_id: (3, 1)}
    assert {p.pilot_id: p.task_id for p in granted.pilots} == {
        2: offers[0].task_id,
        3: offers[1].task_id,
        4: None,
    }


def test_a_roster_of_many_is_checked_as_a_round_of_few(store_for: Any) -> None:
    """The master asks about its whole roster each heartbeat (one statement for many), about a
    round's few pilots otherwise (one by one): the same keys and gone pilots either way."""
    store = store_for(Clock(), default_architecture=Architecture.DISTRIBUTED)
    answers = _register(store, 40)
    master = answers[0].master
    assert master is not None
    store.deregister(answers[5].pilot_id)
    asked = (*(a.pilot_id for a in answers), 999)
    whole = store.sync("S", SiteSync(master.pilot_id, master.epoch, pilots=asked))
    assert whole.gone == (answers[5].pilot_id, 999)
    assert len(whole.keys) == 39
    few = [
        store.sync("S", SiteSync(master.pilot_id, master.epoch, pilots=asked[i : i + 3]))
        for i in range(0, len(asked), 3)
    ]
    assert tuple(k for answer in few for k in answer.keys) == whole.keys
    assert tuple(g for answer in few for g in answer.gone) == whole.gone


def test_the_master_gets_its_pilots_keys_for_its_epoch_only(store_for: Any) -> None:
    """Each pilot's own key comes with its registration; the master of an epoch gets each pilot's
    key for that epoch (the claim's answer, ``sync``), and ``sync`` names the asked-about pilots
    that are no live pilots of the site (revoked, gone, never were)."""
    clock = Clock()
    store = store_for(clock, default_architecture=Architecture.DISTRIBUTED)
    answers = _register(store, 4)
    (elsewhere,) = _register(store, 1, site="T")
    own = {a.pilot_id: bytes.fromhex(a.pilot_key or "") for a in answers}
    assert len(set(own.values())) == 4 and all(len(k) == 32 for k in own.values())
    master = answers[0].master
    assert master is not None
    store.deregister(3)
    answer = store.sync("S", SiteSync(master.pilot_id, master.epoch, pilots=(2, 3, 4, 77, 5)))
    assert answer.keys == (
        PilotKey(2, pilotkeys.epoch_key(own[2], master.epoch).hex()),
        PilotKey(4, pilotkeys.epoch_key(own[4], master.epoch).hex()),
    )
    assert answer.gone == (3, elsewhere.pilot_id, 77)  # left, of another site, unknown
    clock.now += 6
    granted = store.claim_master("S", Claim(2))
    assert granted.granted and granted.master is not None
    keys = {p.pilot_id: p.key for p in granted.pilots}
    epoch = granted.master.epoch
    assert keys == {p: pilotkeys.epoch_key(own[p], epoch).hex() for p in (2, 4)}
    assert keys[4] != answer.keys[1].key  # another epoch, another key


def test_a_site_runs_only_what_its_data_allows(store_for: Any) -> None:
    clock = Clock()
    store = store_for(clock, default_architecture=Architecture.DISTRIBUTED)
    s_answers = _register(store, 2, site="S")
    t_answers = _register(store, 2, site="T", port=5000)
    store.submit(parse_workflow(generate("w1", scale=2 / 80)))
    s_master, t_master = s_answers[0].master, t_answers[0].master
    assert s_master is not None and t_master is not None
    first = store.sync("S", SiteSync(s_master.pilot_id, s_master.epoch, want=1)).tasks[0]
    placed = store.assign(
        "S", SiteAssign(s_master.pilot_id, s_master.epoch, (Pair(first.task_id, 2),))
    ).accepted[0]
    done = Completion(first.task_id, placed.attempt, 0, first.outputs)
    store.sync("S", SiteSync(s_master.pilot_id, s_master.epoch, (SiteCompletion(2, done),)))
    # Its step-1 task reads a file produced at S: S gets it, T does not.
    t_tasks = store.sync("T", SiteSync(t_master.pilot_id, t_master.epoch, want=10)).tasks
    s_tasks = store.sync("S", SiteSync(s_master.pilot_id, s_master.epoch, want=10)).tasks
    reader = [o for o in s_tasks if first.outputs[0] in o.inputs]
    assert len(reader) == 1 and reader[0].task_id not in {o.task_id for o in t_tasks}


def _workflow(*tasks: dict[str, Any]) -> Any:
    return parse_workflow({"name": "wf", "tasks": list(tasks)})


def _run_at(store: Store, site: str, master: Any, pilot: int, offer: Any) -> None:
    """The site's master assigns ``offer`` to ``pilot``, which completes it at once."""
    (placed,) = store.assign(
        site, SiteAssign(master.pilot_id, master.epoch, (Pair(offer.task_id, pilot),))
    ).accepted
    done = Completion(offer.task_id, placed.attempt, 0, offer.outputs)
    answer = store.sync(
        site, SiteSync(master.pilot_id, master.epoch, (SiteCompletion(pilot, done),))
    )
    assert answer.results[0].accepted


def test_a_task_requiring_another_site_is_neither_offered_nor_assignable(store_for: Any) -> None:
    clock, store, s_master, t_master = _two_distributed_sites(store_for)
    store.submit(_workflow({"name": "x", "command": "true", "requirements": 'TARGET.Site == "T"'}))
    s_sync = store.sync("S", SiteSync(s_master.pilot_id, s_master.epoch, want=10))
    assert s_sync.tasks == () and s_sync.queued == 0
    (offer,) = store.sync("T", SiteSync(t_master.pilot_id, t_master.epoch, want=10)).tasks
    answer = store.assign(
        "S", SiteAssign(s_master.pilot_id, s_master.epoch, (Pair(offer.task_id, 2),))
    )
    assert answer.accepted == ()
    (refused,) = answer.refused
    assert (refused.task_id, refused.pilot_id) == (offer.task_id, 2)
    assert "the task's Requirements are not met" in refused.reason
    assert 'TARGET.Site == "T"' in refused.reason
    assert store.counters.snapshot(clock.now)["overall"]["rounds"]["refused"] == {"match": 1}
    placed = store.assign(
        "T", SiteAssign(t_master.pilot_id, t_master.epoch, (Pair(offer.task_id, 4),))
    ).accepted
    assert [(p.task_id, p.pilot_id) for p in placed] == [(offer.task_id, 4)]


def test_a_merge_of_inputs_made_at_two_sites_runs_once_at_one_of_them(store_for: Any) -> None:
    _, store, s_master, t_master = _two_distributed_sites(store_for)
    store.submit(
        _workflow(
            {"name": "a", "command": "true", "outputs": ["/fa"]},
            {"name": "b", "command": "true", "outputs": ["/fb"]},
            {"name": "m", "command": "true", "inputs": ["/fa", "/fb"], "outputs": ["/fm"]},
        )
    )
    s_offers = store.sync("S", SiteSync(s_master.pilot_id, s_master.epoch, want=10)).tasks
    _run_at(store, "S", s_master, 2, next(o for o in s_offers if o.name == "a"))
    t_offers = store.sync("T", SiteSync(t_master.pilot_id, t_master.epoch, want=10)).tasks
    _run_at(store, "T", t_master, 4, next(o for o in t_offers if o.name == "b"))
    # One input made at each site: both sites are offered the merge; the first assign takes it.
    (at_s,) = store.sync("S", SiteSync(s_master.pilot_id, s_master.epoch, want=10)).tasks
    (at_t,) = store.sync("T", SiteSync(t_master.pilot_id, t_master.epoch, want=10)).tasks
    assert at_s.name == at_t.name == "m"
    _run_at(store, "T", t_master, 4, at_t)
    late = store.assign(
        "S", SiteAssign(s_master.pilot_id, s_master.epoch, (Pair(at_s.task_id, 2),))
    )
    assert late.accepted == () and "not queued" in late.refused[0].reason
    rows = store.task_rows()
    assert {r.state for r in rows} == {"done"} and {r.attempt for r in rows} == {1}


def _distributed_site(store_for: Any) -> tuple[Any, MasterInfo]:
    """A store whose site S is distributed, three pilots registered; its master."""
    store = store_for(Clock(), default_architecture=Architecture.DISTRIBUTED)
    master = _register(store, 3)[0].master
    assert master is not None
    return store, master


def test_a_site_is_offered_first_what_its_idle_pilots_made(store_for: Any) -> None:
    store, master = _distributed_site(store_for)
    store.submit(parse_workflow(generate("w1", scale=8 / 80)))  # 8 chains of 2 steps
    offers = store.sync("S", SiteSync(master.pilot_id, master.epoch, want=1)).tasks
    _run_at(store, "S", master, 2, offers[0])
    # Seven step-0 tasks are older; the step-1 task reading pilot 2's output comes first.
    (first,) = store.sync("S", SiteSync(master.pilot_id, master.epoch, want=1)).tasks
    assert first.inputs == offers[0].outputs


def test_assign_names_each_task_s_successors_and_takes_them_with_the_completion(
    store_for: Any,
) -> None:
    """A chain a -> b (b reads a's output), a merge m of a and c, and a task d that must run on
    another site: ``assign`` names b and m as a's successors (m needs c too; d does not fit),
    says a feeds more; a round without a sync carries a's completion in its ``assign``, which
    queues b and frees the pilot before the pair (b, that pilot) is checked."""
    store, master = _distributed_site(store_for)
    store.submit(
        _workflow(
            {"name": "a", "command": "true", "outputs": ["/fa"]},
            {"name": "c", "command": "true", "outputs": ["/fc"]},
            {"name": "b", "command": "true", "inputs": ["/fa"], "outputs": ["/fb"]},
            {"name": "m", "command": "true", "inputs": ["/fa", "/fc"], "outputs": ["/fm"]},
            {
                "name": "d",
                "command": "true",
                "inputs": ["/fa"],
                "requirements": 'TARGET.Site == "elsewhere"',
            },
        )
    )
    offers = store.sync("S", SiteSync(master.pilot_id, master.epoch, want=10)).tasks
    a = next(o for o in offers if o.name == "a")
    (placed,) = store.assign(
        "S", SiteAssign(master.pilot_id, master.epoch, (Pair(a.task_id, 2),))
    ).accepted
    assert [s.name for s in placed.successors] == ["b", "m"] and placed.more
    c = next(o for o in offers if o.name == "c")
    assert placed.needs == ((), (c.task_id,))  # the merge waits for c too
    b = placed.successors[0]
    assert b.inputs == ("/fa",) and b.outputs == ("/fb",)
    # b is not runnable yet: a pair for it alone is refused.
    early = store.assign("S", SiteAssign(master.pilot_id, master.epoch, (Pair(b.task_id, 3),)))
    assert early.accepted == () and "waiting, not queued" in early.refused[0].reason
    done = Completion(a.task_id, placed.attempt, 0, ("/fa",))
    answer = store.assign(
        "S",
        SiteAssign(
            master.pilot_id,
            master.epoch,
            (Pair(b.task_id, 2),),  # the pilot that ran a: busy until its completion counts
            completions=(SiteCompletion(2, done),),
        ),
    )
    assert [r.accepted for r in answer.results] == [True]
    assert [(p.task_id, p.pilot_id) for p in answer.accepted] == [(b.task_id, 2)]
    (after_b,) = answer.accepted
    assert after_b.successors == () and not after_b.more  # nothing reads b's output
    states = {r.name: r.state for r in store.task_rows()}
    assert states == {"a": "done", "c": "queued", "b": "running", "m": "waiting", "d": "queued"}


def test_a_merge_is_each_input_makers_joint_successor_and_runs_without_a_sync(
    store_for: Any,
) -> None:
    """m reads the outputs of a and c, both placed at the site: each one's ``assign`` names m
    with the other; the completions of both, carried by the ``assign`` of m, queue it first."""
    store, master = _distributed_site(store_for)
    store.submit(
        _workflow(
            {"name": "a", "command": "true", "outputs": ["/fa"]},
            {"name": "c", "command": "true", "outputs": ["/fc"]},
            {"name": "m", "command": "true", "inputs": ["/fa", "/fc"], "outputs": ["/fm"]},
        )
    )
    offers = {
        o.name: o for o in store.sync("S", SiteSync(master.pilot_id, master.epoch, want=10)).tasks
    }
    a, c = offers["a"], offers["c"]
    pairs = (Pair(a.task_id, 2), Pair(c.task_id, 3))
    placed = store.assign("S", SiteAssign(master.pilot_id, master.epoch, pairs)).accepted
    by_task = {p.task_id: p for p in placed}
    assert [s.name for s in by_task[a.task_id].successors] == ["m"]
    assert by_task[a.task_id].needs == ((c.task_id,),) and not by_task[a.task_id].more
    assert by_task[c.task_id].needs == ((a.task_id,),) and not by_task[c.task_id].more
    (m,) = by_task[c.task_id].successors
    done = (
        SiteCompletion(2, Completion(a.task_id, by_task[a.task_id].attempt, 0, ("/fa",))),
        SiteCompletion(3, Completion(c.task_id, by_task[c.task_id].attempt, 0, ("/fc",))),
    )
    answer = store.assign(
        "S", SiteAssign(master.pilot_id, master.epoch, (Pair(m.task_id, 3),), completions=done)
    )
    assert [(p.task_id, p.pilot_id) for p in answer.accepted] == [(m.task_id, 3)]


def test_a_completion_carried_by_assign_for_another_site_s_pilot_is_refused(
    store_for: Any,
) -> None:
    clock = Clock()
    store = store_for(clock, default_architecture=Architecture.DISTRIBUTED)
    s_master = _register(store, 2, site="S", port=4000)[0].master
    t_master = _register(store, 2, site="T", port=5000)[0].master
    assert s_master is not None and t_master is not None
    store.submit(_workflow({"name": "x", "command": "true"}))
    (offer,) = store.sync("T", SiteSync(t_master.pilot_id, t_master.epoch, want=10)).tasks
    (placed,) = store.assign(
        "T", SiteAssign(t_master.pilot_id, t_master.epoch, (Pair(offer.task_id, 4),))
    ).accepted
    forged = SiteCompletion(4, Completion(offer.task_id, placed.attempt, 0))
    answer = store.assign("S", SiteAssign(s_master.pilot_id, s_master.epoch, completions=(forged,)))
    assert [r.accepted for r in answer.results] == [False]
    assert "no live pilot of S" in answer.results[0].state
    assert {r.state for r in store.task_rows()} == {"running"}


def test_a_task_with_an_input_made_at_another_site_is_no_successor(store_for: Any) -> None:
    """Where such a task runs is the offers' choice (the site holding most of its inputs):
    ``assign`` names it no successor, and says the task feeds more."""
    clock = Clock()
    store = store_for(clock, default_architecture=Architecture.DISTRIBUTED)
    s_master = _register(store, 2, site="S", port=4000)[0].master
    t_master = _register(store, 2, site="T", port=5000)[0].master
    assert s_master is not None and t_master is not None
    store.submit(
        _workflow(
            {"name": "a", "command": "true", "outputs": ["/fa"]},
            {"name": "x", "command": "true", "outputs": ["/fx"]},
            {"name": "m", "command": "true", "inputs": ["/fa", "/fx"]},
        )
    )
    t_offers = store.sync("T", SiteSync(t_master.pilot_id, t_master.epoch, want=10)).tasks
    _run_at(store, "T", t_master, 4, next(o for o in t_offers if o.name == "x"))
    s_offers = store.sync("S", SiteSync(s_master.pilot_id, s_master.epoch, want=10)).tasks
    a = next(o for o in s_offers if o.name == "a")
    (placed,) = store.assign(
        "S", SiteAssign(s_master.pilot_id, s_master.epoch, (Pair(a.task_id, 2),))
    ).accepted
    assert placed.successors == () and placed.more


def test_assign_names_a_bounded_number_of_successors(store_for: Any) -> None:
    clock = Clock()
    store = store_for(clock, default_architecture=Architecture.DISTRIBUTED)
    master = _register(store, 2)[0].master
    assert master is not None
    readers = [
        {"name": f"r{i}", "command": "true", "inputs": ["/fa"]} for i in range(MAX_SUCCESSORS + 2)
    ]
    store.submit(_workflow({"name": "a", "command": "true", "outputs": ["/fa"]}, *readers))
    (a,) = store.sync("S", SiteSync(master.pilot_id, master.epoch, want=10)).tasks
    (placed,) = store.assign(
        "S", SiteAssign(master.pilot_id, master.epoch, (Pair(a.task_id, 2),))
    ).accepted
    names = [s.name for s in placed.successors]
    assert names == [f"r{i}" for i in range(MAX_SUCCESSORS)] and placed.more


def test_two_sites_are_offered_their_shares_first_and_told_which_are_the_others(
    store_for: Any,
) -> None:
    """Tasks any site may run go first to the site whose share they are (``sched.offers``):
    each ``sync`` marks the others' as ``shared``, which a master keeps for no later round."""
    store = store_for(Clock(), default_architecture=Architecture.DISTRIBUTED)
    s_master = _register(store, 3)[0].master
    t_master = _register(store, 3, site="T", port=5000)[0].master
    assert s_master is not None and t_master is not None
    store.submit(_workflow(*({"name": f"x{i}", "command": "true"} for i in range(80))))
    s_offers = store.sync("S", SiteSync(s_master.pilot_id, s_master.epoch, want=80)).tasks
    t_offers = store.sync("T", SiteSync(t_master.pilot_id, t_master.epoch, want=80)).tasks
    assert len(s_offers) == len(t_offers) == 80
    s_own = [o.task_id for o in s_offers if not o.shared]
    t_own = [o.task_id for o in t_offers if not o.shared]
    assert s_own and t_own and not set(s_own) & set(t_own)
    assert sorted(s_own + t_own) == sorted(o.task_id for o in s_offers)
    assert [o.task_id for o in s_offers[: len(s_own)]] == s_own  # its share first, by age
    assert s_own == sorted(s_own)
