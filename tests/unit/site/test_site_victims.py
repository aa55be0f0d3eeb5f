"""The victim policy (Sfiligoi 2013, "Selecting the cooperative victim"), with worked examples."""

from __future__ import annotations

from glidein_ext.site.pilots import Pilot
from glidein_ext.site.victims import Policy, choose_victims


def pilot(slot: str, owner: str = "cms@site", cpus: int = 4, **kw: object) -> Pilot:
    kw.setdefault("can_postpone", True)
    return Pilot(slot=slot, owner=owner, cpus=cpus, **kw)  # type: ignore[arg-type]


PRIO = {"cms@site": 500.0, "atlas@site": 2000.0}


def slots(choices: object) -> list[str]:
    return [c.pilot.slot for c in choices]  # type: ignore[attr-defined]


def test_least_privileged_user_first_then_lowest_waste() -> None:
    pilots = [
        pilot("a", "cms@site", waste1k=10),
        pilot("b", "atlas@site", waste1k=900),
        pilot("c", "atlas@site", waste1k=100),
        pilot("d", "cms@site", waste1k=0),
    ]
    # Need 8 CPUs: atlas (priority 2000, worse than cms's 500) goes first: c (100) then b (900).
    sel = choose_victims(pilots, PRIO, 8, Policy.WASTE)
    assert slots(sel.victims) == ["c", "b"]
    assert sel.satisfied and sel.cpus_chosen == 8
    # Need 9: one more pilot, from cms, its lowest waste: d.
    sel = choose_victims(pilots, PRIO, 9, Policy.WASTE)
    assert slots(sel.victims) == ["c", "b", "d"]
    assert (
        "atlas@site" in sel.victims[0].reason
        and "ADD_FINAL_EXP_WASTE1k 100" in sel.victims[0].reason
    )
    assert all("\n" not in c.reason for c in sel.victims)


def test_completion_policy_orders_by_last_expected_job_end() -> None:
    pilots = [
        pilot("a", waste1k=0, last_exp_job_end=5000),
        pilot("b", waste1k=500, last_exp_job_end=1000),
        pilot("idle", waste1k=0, used1k=0),  # no job: completes now
        pilot("unknown", waste1k=0, used1k=512),  # no estimate: last
    ]
    sel = choose_victims(pilots, {}, 16, Policy.COMPLETION)
    assert slots(sel.victims) == ["idle", "b", "a", "unknown"]
    sel = choose_victims(pilots, {}, 16, Policy.WASTE)
    assert slots(sel.victims) == ["a", "idle", "unknown", "b"]


def test_enough_already_draining_chooses_nobody() -> None:
    pilots = [
        pilot("d1", cpus=4, can_postpone=False, waste1k=500),
        pilot("d2", cpus=2, site_vacate=True, waste1k=500),
        pilot("x", cpus=8, waste1k=0),
    ]
    sel = choose_victims(pilots, PRIO, 6, Policy.WASTE)
    assert sel.victims == ()
    assert slots(sel.draining) == ["d1", "d2"] and sel.cpus_draining == 6 and sel.satisfied
    assert "CAN_POSTPONE_LAST_JOB false" in sel.draining[0].reason
    assert "site asked" in sel.draining[1].reason
    # One CPU more than draining covers: one new victim.
    sel = choose_victims(pilots, PRIO, 7, Policy.WASTE)
    assert slots(sel.victims) == ["x"]


def test_ties_by_priority_factor_then_slot_name() -> None:
    pilots = [
        pilot("s3", waste1k=50, priority_factor=10),
        pilot("s2", waste1k=50, priority_factor=0),
        pilot("s1", waste1k=50, priority_factor=10),
        pilot("s0", waste1k=50),  # missing factor counts as 0
    ]
    sel = choose_victims(pilots, {}, 16, Policy.WASTE)
    assert slots(sel.victims) == ["s0", "s2", "s1", "s3"]


def test_stale_pilots_are_hard_kill_candidates_only() -> None:
    pilots = [
        pilot("stuck", waste1k=0, stale=True, heartbeat_age=4000),
        pilot("stuck-draining", can_postpone=False, stale=True, heartbeat_age=5000),
        pilot("ok", waste1k=700),
    ]
    sel = choose_victims(pilots, {}, 4, Policy.WASTE)
    assert slots(sel.hard_kill) == ["stuck", "stuck-draining"]
    assert "heartbeat 1h06m old" in sel.hard_kill[0].reason  # 4000 s, in human time
    assert slots(sel.victims) == ["ok"] and sel.draining == ()


def test_not_enough_pilots_is_reported() -> None:
    sel = choose_victims([pilot("a", cpus=2, waste1k=1)], {}, 10, Policy.WASTE)
    assert slots(sel.victims) == ["a"] and not sel.satisfied


def test_unknown_user_counts_as_most_privileged() -> None:
    pilots = [pilot("known", "atlas@site", waste1k=1000), pilot("stranger", "x@y", waste1k=0)]
    sel = choose_victims(pilots, {"atlas@site": 1.0}, 4, Policy.WASTE)
    assert slots(sel.victims) == ["known"]


def test_zero_need_chooses_nobody() -> None:
    assert choose_victims([pilot("a", waste1k=0)], {}, 0, Policy.WASTE).victims == ()


def test_cache_policy_spares_the_pilots_whose_cache_tasks_still_need() -> None:
    pilots = [
        pilot("big", cached_needed_mb=1400, last_exp_job_end=1000),
        pilot("none", cached_needed_mb=0, last_exp_job_end=9000),
        pilot("idle", cached_needed_mb=0, used1k=0),  # no job: completes now
        pilot("small", cached_needed_mb=100, last_exp_job_end=500),
        pilot("silent", last_exp_job_end=100),  # publishes no value: last
    ]
    # The two holding nothing needed first (ties by the completion key: idle, then 9000), then
    # the least needed (100 MB), then 1400 MB, the silent pilot last.
    sel = choose_victims(pilots, {}, 20, Policy.CACHE, now=5400)
    assert slots(sel.victims) == ["idle", "none", "small", "big", "silent"]
    expected = "CACHED_INPUT_NEEDED_MB 0, LAST_EXP_JOB_END 1970-01-01 02:30:00 UTC (in 1h00m)"
    assert expected in sel.victims[1].reason  # 9000: a time, not an epoch
    assert "LAST_EXP_JOB_END now (idle)" in sel.victims[0].reason
    assert "CACHED_INPUT_NEEDED_MB unknown" in sel.victims[4].reason
    # Two CPUs' worth (4-CPU pilots: 8 CPUs): completion would take "silent" and "small", which
    # hold needed cache; cache takes the two holding none.
    assert slots(choose_victims(pilots, {}, 8, Policy.COMPLETION).victims) == ["idle", "silent"]
    assert slots(choose_victims(pilots, {}, 8, Policy.CACHE).victims) == ["idle", "none"]


def test_cache_policy_still_takes_the_least_privileged_user_first() -> None:
    pilots = [
        pilot("cms-empty", "cms@site", cached_needed_mb=0),
        pilot("atlas-full", "atlas@site", cached_needed_mb=5000),
    ]
    sel = choose_victims(pilots, PRIO, 4, Policy.CACHE)
    assert slots(sel.victims) == ["atlas-full"]
