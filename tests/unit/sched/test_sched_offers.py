"""What the Task Queue offers a distributed site (``sched.offers``): Requirements, where a task
whose inputs were made at several sites goes, and local-first order."""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from glidein_ext.sched import offers as offers_module
from glidein_ext.sched.offers import Made, Member, Offers, Runnable, by_site, choose_offers

ANY = "any"
ONLY_B = "site-b"  # a group whose Requirements only B's pilots meet

PILOTS = (
    Member(1, "A", idle=True),
    Member(2, "A", idle=False),
    Member(3, "B", idle=True),
    Member(4, "B", idle=False),
)


def _matches(pilot_id: int, group: Hashable) -> bool:
    return group == ANY or (group == ONLY_B and pilot_id in (3, 4))


def _offers(
    site: str,
    queued: list[Runnable],
    made: Mapping[str, Made] | None = None,
    members: tuple[Member, ...] = PILOTS,
    want: int = 10,
    now: float = 0.0,
    hold: float = 60.0,
) -> Offers:
    return choose_offers(site, want, queued, made or {}, by_site(members), _matches, now, hold)


def test_a_task_is_offered_only_to_sites_with_a_pilot_it_matches() -> None:
    queued = [Runnable(10, ONLY_B), Runnable(11, ANY)]
    assert _offers("A", queued) == Offers((11,), 1, 0)
    assert _offers("B", queued).task_ids == (10, 11)


def test_a_merge_with_one_input_made_at_each_site_is_offered_to_both() -> None:
    made = {"fa": Made("A", 2), "fb": Made("B", 4)}
    merge = [Runnable(20, ANY, ("fa", "fb"))]
    assert _offers("A", merge, made).task_ids == (20,)
    assert _offers("B", merge, made).task_ids == (20,)


def test_a_task_goes_to_the_site_holding_most_of_its_input_bytes() -> None:
    made = {"f1": Made("A", 2, 100), "f2": Made("A", 2, 100), "f3": Made("B", 4, 150)}
    task = [Runnable(30, ANY, ("f1", "f2", "f3"))]
    assert _offers("A", task, made).task_ids == (30,)
    assert _offers("B", task, made) == Offers((), 0, 0)  # A has an idle pilot: it waits for A
    by_size = {"f1": Made("A", 2, 100), "f3": Made("B", 4, 150)}
    assert _offers("B", [Runnable(31, ANY, ("f1", "f3"))], by_size).task_ids == (31,)
    assert _offers("A", [Runnable(31, ANY, ("f1", "f3"))], by_size).task_ids == ()


def test_it_goes_elsewhere_when_the_holding_site_has_no_idle_pilot_or_after_the_hold() -> None:
    made = {"f": Made("A", 2)}
    task = [Runnable(40, ANY, ("f",), since=100.0)]
    busy_a = (Member(1, "A", False), Member(2, "A", False), Member(3, "B", True))
    assert _offers("B", task, made, members=busy_a).task_ids == (40,)
    assert _offers("B", task, made, now=150.0).task_ids == ()
    assert _offers("B", task, made, now=160.0).task_ids == (40,)  # waited 60 s: any site


def test_a_holding_site_no_pilot_of_which_matches_does_not_keep_it() -> None:
    made = {"f": Made("A", 2)}
    assert _offers("B", [Runnable(50, ONLY_B, ("f",))], made).task_ids == (50,)
    gone = (Member(3, "B", True),)  # A's pilots are gone: B gets it at once
    assert _offers("B", [Runnable(51, ANY, ("f",))], made, members=gone).task_ids == (51,)


def test_tasks_whose_inputs_an_idle_pilot_of_the_site_made_come_first() -> None:
    made = {"f1": Made("A", 1), "f2": Made("A", 2)}  # pilot 1 idle, pilot 2 busy
    queued = [
        Runnable(1, ANY),
        Runnable(2, ANY),
        Runnable(3, ANY, ("f2",)),
        Runnable(4, ANY, ("f1",)),
        Runnable(5, ANY, (), priority=1),
    ]
    offers = _offers("A", queued, made, want=3)
    assert offers == Offers((5, 4, 1), 5, 1)  # priority, then local, then age
    assert _offers("A", queued, made, want=0) == Offers((), 5, 0)


def test_two_sites_are_offered_their_own_shares_first_in_blocks_of_ids() -> None:
    block = offers_module.SHARE_BLOCK
    # ids 0..block-1 are A's share, the next block B's, the next A's again
    queued = [Runnable(i, ANY) for i in range(3 * block)]
    a = _offers("A", queued, want=3 * block)
    b = _offers("B", queued, want=3 * block)
    a_first = (*range(block), *range(2 * block, 3 * block))
    b_share = tuple(range(block, 2 * block))
    # its own share by age, then the other's newest first (that site takes it oldest first)
    assert a.task_ids == (*a_first, *reversed(b_share))
    assert b.task_ids == (*b_share, *reversed(a_first))
    assert a.shared == frozenset(range(block, 2 * block))  # B gets these first
    assert b.shared == frozenset(a_first)
    assert a.runnable == b.runnable == 3 * block
    # A site alone (B has no pilot) shares nothing
    alone = _offers("A", queued, members=PILOTS[:2], want=5)
    assert alone.task_ids == (0, 1, 2, 3, 4) and alone.shared == frozenset()


def test_a_merge_tied_between_two_sites_is_the_share_of_one_of_them() -> None:
    made = {"fa": Made("A", 2), "fb": Made("B", 4)}
    block = offers_module.SHARE_BLOCK
    merges = [Runnable(0, ANY, ("fa", "fb")), Runnable(block, ANY, ("fa", "fb"))]
    assert _offers("A", merges, made).shared == frozenset({block})
    assert _offers("B", merges, made).shared == frozenset({0})
    # held by A alone (B's pilots are busy, so B may not have it): A's share, whatever its id
    only_a = {"fa": Made("A", 2), "fa2": Made("A", 2), "fb": Made("B", 4)}
    task = [Runnable(block, ANY, ("fa", "fa2", "fb"))]
    assert _offers("A", task, only_a).shared == frozenset()


def _by_definition(
    site: str,
    want: int,
    queued: list[Runnable],
    made: Mapping[str, Made],
    members: tuple[Member, ...],
) -> Offers:
    """The offers as the module docstring defines them: every candidate's key, sorted."""
    sites = offers_module._Sites(by_site(members), _matches)
    idle_here = {m.pilot_id for m in members if m.site == site and m.idle}
    keys = []
    for position, task in enumerate(queued):
        able = sites.able(task.group)
        if site not in able:
            continue
        held: dict[str, int] = {}
        for lfn in task.inputs:
            where = made.get(lfn)
            if where is not None and where.site in able:
                held[where.site] = held.get(where.site, 0) + where.size
        if held and not offers_module._ours(site, task, held, sites, 0.0, 60.0):
            continue
        local = any(
            lfn in made and made[lfn].site == site and made[lfn].pilot_id in idle_here
            for lfn in task.inputs
        )
        tier = offers_module.LOCAL if local else offers_module.OTHER
        share = offers_module._share(task.task_id, held, sorted(able)) != site
        keys.append((-task.priority, tier, share, -position if share else position, task))
    best = sorted(keys, key=lambda k: k[:4])[: max(want, 0)]
    return Offers(
        tuple(k[4].task_id for k in best) if want > 0 else (),
        len(keys),
        sum(1 for k in best if k[1] == offers_module.LOCAL) if want > 0 else 0,
        frozenset(k[4].task_id for k in best if k[2]) if want > 0 else frozenset(),
    )


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_one_pass_choice_is_the_sorted_definition(data: st.DataObject) -> None:
    """The choice keeps each class's oldest (own share) or newest (another's) ``want`` as the
    queue goes by; the same offers as sorting every candidate's key."""
    members = tuple(
        Member(pilot_id, data.draw(st.sampled_from("ABC")), data.draw(st.booleans()))
        for pilot_id in range(1, data.draw(st.integers(1, 6)) + 1)
    )
    files = [f"f{i}" for i in range(6)]
    made = {
        lfn: Made(data.draw(st.sampled_from("ABC")), data.draw(st.integers(1, 6)), size)
        for lfn in files
        if (size := data.draw(st.integers(0, 3)))
    }
    ids = data.draw(st.lists(st.integers(0, 200), max_size=40, unique=True))
    queued = [
        Runnable(
            task_id,
            data.draw(st.sampled_from((ANY, ONLY_B))),
            tuple(data.draw(st.lists(st.sampled_from(files), max_size=3, unique=True))),
            data.draw(st.integers(0, 2)),
        )
        for task_id in ids
    ]
    site, want = data.draw(st.sampled_from("ABC")), data.draw(st.integers(0, 12))
    expected = _by_definition(site, want, queued, made, members)
    assert _offers(site, queued, made, members=members, want=want) == expected
