"""The pure matcher: classad2 equivalence, grouping, the input index, locality, TTL, waitForData."""

from __future__ import annotations

import random

from glidein_ext import classads
from glidein_ext.tq.models import MatchSpec, PilotInfo, QueuedTask
from glidein_ext.tq.service.matching.match_groups import Verdict, pilot_ad, task_ad
from glidein_ext.tq.service.matching.matcher import Matcher

REQUIREMENTS = [
    "true",
    "TARGET.Cpus >= MY.RequestCpus",
    'TARGET.Site == "T0_CH_CERN"',
    'TARGET.Site =!= "T2_ES_CIEMAT" && TARGET.Memory >= 2000',
    "TARGET.HasDocker =?= true",
    "TARGET.Disk > MY.RequestDisk * 2 || TARGET.Cpus > 4",
    'regexp("^T[12]_", TARGET.Site)',
    "TARGET.Missing > 3",  # undefined: never matches
    'member(TARGET.SE, {"srm.cern.ch", "se.ciemat.es"})',
]
RANKS = ["0", "TARGET.Memory", "TARGET.Cpus * 10 + TARGET.Disk / 1000", "TARGET.HasDocker", "-1.5"]
PILOT_REQUIREMENTS = ["true", "TARGET.RequestCpus <= 2", 'TARGET.Owner =!= "bad"', "MY.Cpus > 1"]
PILOT_RANKS = ["0", "TARGET.Prio", "-TARGET.RequestMemory", 'TARGET.Owner == "cms"']
SITES = [("T0_CH_CERN", "srm.cern.ch"), ("T2_ES_CIEMAT", "se.ciemat.es"), ("T3_XX", "se.xx")]


def _varied(seed: int) -> tuple[list[QueuedTask], list[PilotInfo]]:
    rng = random.Random(seed)
    tasks = []
    for task_id in range(1, 301):
        task_attrs: list[tuple[str, classads.Scalar]] = [("Prio", rng.randint(0, 3))]
        if rng.random() < 0.5:
            task_attrs.append(("Owner", rng.choice(["cms", "bad", "atlas"])))
        spec = MatchSpec(
            requirements=rng.choice(REQUIREMENTS),
            rank=rng.choice(RANKS),
            request_cpus=rng.choice([1, 2, 4]),
            request_disk=rng.choice([0, 1000]),
            attributes=tuple(task_attrs),
        )
        tasks.append(QueuedTask(task_id, spec, priority=rng.randint(0, 2)))
    pilots = []
    for pilot_id in range(1, 41):
        site, se = rng.choice(SITES)
        attributes: dict[str, classads.Scalar] = {}
        if rng.random() < 0.5:
            attributes["HasDocker"] = rng.random() < 0.5
        pilots.append(
            PilotInfo(
                pilot_id,
                site=site,
                se=se,
                host=f"wn{pilot_id}",
                cpus=rng.choice([1, 2, 8]),
                memory=rng.choice([1000, 4000]),
                disk=rng.choice([500, 5000]),
                attributes=attributes,
                requirements=rng.choice(PILOT_REQUIREMENTS),
                rank=rng.choice(PILOT_RANKS),
            )
        )
    return tasks, pilots


def test_matching_equals_symmetric_match_and_rank() -> None:
    tasks, pilots = _varied(1)
    matcher = Matcher()
    for task in tasks:
        matcher.add_task(task)
    assert matcher.group_count < len(tasks)
    matched_pairs = 0
    for pilot in pilots:
        matcher.add_pilot(pilot)
        got = matcher.matching(pilot.pilot_id, now=0.0)
        p_ad = pilot_ad(pilot)
        expected = {}
        for task in tasks:
            t_ad = task_ad(task.spec)  # a fresh ad per task: the naive answer
            fits = task.spec.request_cpus <= pilot.cpus and task.spec.request_disk <= pilot.disk
            if fits and t_ad.symmetricMatch(p_ad):
                expected[task.task_id] = (classads.rank(p_ad, t_ad), classads.rank(t_ad, p_ad))
        assert {k: (v.pilot_rank, v.task_rank) for k, v in got.items()} == expected
        matched_pairs += len(expected)
    assert 0 < matched_pairs < len(tasks) * len(pilots)  # the set is varied both ways


def test_choose_prefers_pilot_rank_then_task_rank_then_priority() -> None:
    matcher = Matcher()
    low = MatchSpec(rank="1")
    high = MatchSpec(rank="TARGET.Cpus")
    matcher.add_task(QueuedTask(1, low, priority=5))
    matcher.add_task(QueuedTask(2, high, priority=0))
    matcher.add_task(QueuedTask(3, high, priority=1))
    matcher.add_pilot(PilotInfo(7, cpus=4))
    choice = matcher.choose(7, now=0.0)
    assert choice is not None and choice.task_id == 3 and choice.task_rank == 4.0
    matcher.remove_task(3)
    assert (c := matcher.choose(7, 0.0)) is not None and c.task_id == 2


def test_groups_are_evaluated_once_per_pilot() -> None:
    matcher = Matcher()
    for task_id in range(1, 1001):
        spec = MatchSpec(requirements=f'TARGET.Site == "S{task_id % 5}"')
        matcher.add_task(QueuedTask(task_id, spec))
    matcher.add_pilot(PilotInfo(1, site="S3"))
    first = matcher.choose(1, 0.0)
    assert first is not None and first.task_id % 5 == 3
    assert matcher.evaluations == 5
    matcher.remove_task(first.task_id)
    second = matcher.choose(1, 0.0)
    assert second is not None and second.task_id == first.task_id + 5
    assert matcher.evaluations == 5  # verdicts are cached per (pilot, group)


def test_never_a_task_longer_than_the_pilot_remaining_life() -> None:
    matcher = Matcher()
    matcher.add_task(QueuedTask(1, MatchSpec(max_runtime=7200), priority=9))
    matcher.add_task(QueuedTask(2, MatchSpec(max_runtime=600)))
    matcher.add_pilot(PilotInfo(1, expires_at=1000.0 + 3600))
    assert (c := matcher.choose(1, now=1000.0)) is not None and c.task_id == 2
    matcher.remove_task(2)
    assert matcher.choose(1, now=1000.0) is None
    assert matcher.choose(1, now=4400.0) is None


def test_resources_must_fit() -> None:
    matcher = Matcher()
    matcher.add_task(QueuedTask(1, MatchSpec(request_cpus=4, request_memory=100)))
    matcher.add_pilot(PilotInfo(1, cpus=2, memory=1000))
    matcher.add_pilot(PilotInfo(2, cpus=4, memory=50))
    matcher.add_pilot(PilotInfo(3, cpus=4, memory=100))
    assert matcher.choose(1, 0.0) is None
    assert matcher.choose(2, 0.0) is None
    assert (c := matcher.choose(3, 0.0)) is not None and c.task_id == 1


def test_locality_picks_the_task_with_most_cached_inputs() -> None:
    matcher = Matcher()
    spec = MatchSpec()
    matcher.add_task(QueuedTask(1, spec, inputs=("/a", "/x"), priority=9))
    matcher.add_task(QueuedTask(2, spec, inputs=("/a", "/b")))
    matcher.add_task(QueuedTask(3, spec, inputs=("/c",)))
    matcher.add_pilot(PilotInfo(1, cached={"/a", "/b"}))
    choice = matcher.choose(1, 0.0)
    assert choice is not None and (choice.task_id, choice.hits) == (2, 2)
    matcher.set_cache(1, ["/c"])
    assert (c := matcher.choose(1, 0.0)) is not None and (c.task_id, c.hits) == (3, 1)


def test_locality_respects_requirements() -> None:
    matcher = Matcher()
    matcher.add_task(QueuedTask(1, MatchSpec(requirements='TARGET.Site == "B"'), inputs=("/a",)))
    matcher.add_task(QueuedTask(2, MatchSpec(), inputs=("/z",)))
    matcher.add_pilot(PilotInfo(1, site="A", cached={"/a"}))
    assert (c := matcher.choose(1, 0.0)) is not None and (c.task_id, c.hits) == (2, 0)


def test_wait_for_data_holds_a_task_for_an_idle_holder_then_lets_go() -> None:
    matcher = Matcher(wait_for_data=60.0)
    matcher.add_task(QueuedTask(1, MatchSpec(), inputs=("/a",), runnable_since=100.0))
    matcher.add_pilot(PilotInfo(1, cached={"/a"}, idle=True))
    matcher.add_pilot(PilotInfo(2))
    assert matcher.choose(2, now=110.0) is None  # held for idle pilot 1
    matcher.set_idle(1, False)
    assert (c := matcher.choose(2, now=110.0)) is not None and c.task_id == 1  # holder is busy
    matcher.set_idle(1, True)
    assert (c := matcher.choose(2, now=161.0)) is not None and c.task_id == 1  # bound elapsed
    assert (c := matcher.choose(1, now=110.0)) is not None and c.hits == 1  # holder takes it


def test_wait_for_data_skips_only_held_tasks() -> None:
    matcher = Matcher(wait_for_data=60.0)
    matcher.add_task(QueuedTask(1, MatchSpec(), inputs=("/a",), priority=5))
    matcher.add_task(QueuedTask(2, MatchSpec(), inputs=("/b",)))
    matcher.add_pilot(PilotInfo(1, cached={"/a"}))
    matcher.add_pilot(PilotInfo(2))
    assert (c := matcher.choose(2, now=1.0)) is not None and c.task_id == 2


def test_removing_pilots_and_tasks_cleans_indexes() -> None:
    matcher = Matcher()
    matcher.add_task(QueuedTask(1, MatchSpec(), inputs=("/a",)))
    matcher.add_pilot(PilotInfo(1, cached={"/a"}))
    matcher.add_cached(1, ["/b"])
    assert matcher.holders("/b") == {1}
    matcher.remove_pilot(1)
    assert matcher.holders("/a") == set() and matcher.holders("/b") == set()
    matcher.remove_task(1)
    assert len(matcher) == 0 and matcher.group_count == 0


def test_deferred_costly_pairs_wait_for_their_verdicts_then_match_as_before() -> None:
    """``defer_costly``: a pair whose expressions call regexp is never evaluated by the matcher
    (it does not match until settled); settled with the verdicts classad2 gives, every choice is
    the plain matcher's."""
    tasks, pilots = _varied(7)
    plain, deferred = Matcher(), Matcher(defer_costly=True)
    for matcher in (plain, deferred):
        for task in tasks:
            matcher.add_task(task)
        for pilot in pilots:
            matcher.add_pilot(pilot)
    regexp_groups = {t.spec.key() for t in tasks if "regexp" in t.spec.requirements}
    assert regexp_groups
    for pilot in pilots:
        found = deferred.matching(pilot.pilot_id, 0.0)
        assert not {t.spec.key() for t in tasks if t.task_id in found} & regexp_groups
        pending = deferred.pending_costly(pilot.pilot_id, 0.0)
        assert {key for key, _task, _pilot in pending} <= regexp_groups
        for key, task_text, pilot_text in pending:
            assert "regexp" in task_text and f"wn{pilot.pilot_id}" in pilot_text
            deferred.settle(pilot.pilot_id, key, plain.verdict(pilot.pilot_id, key))
        assert deferred.pending_costly(pilot.pilot_id, 0.0) == []
        assert deferred.choose(pilot.pilot_id, 0.0) == plain.choose(pilot.pilot_id, 0.0)


def test_a_costly_pilot_defers_every_group() -> None:
    matcher = Matcher(defer_costly=True)
    matcher.add_task(QueuedTask(1, MatchSpec(requirements="TARGET.Cpus >= 1")))
    matcher.add_task(QueuedTask(2, MatchSpec(requirements="TARGET.Cpus >= 2")))
    pilot = PilotInfo(1, site="S", host="h", cpus=4, requirements='regexp("^T", TARGET.Name)')
    matcher.add_pilot(pilot)
    assert matcher.choose(1, 0.0) is None and matcher.evaluations == 0
    pending = matcher.pending_costly(1, 0.0)
    assert len(pending) == 2 and matcher.pending_costly(1, 0.0, limit=1) == pending[:1]
    for key, _task, _pilot in pending:
        matcher.settle(1, key, Verdict(True))
    choice = matcher.choose(1, 0.0)
    assert choice is not None and choice.task_id == 1 and matcher.evaluations == 0


def test_needed_cached_lists_the_pilots_files_a_queued_task_reads_bounded() -> None:
    matcher = Matcher()
    never = MatchSpec(requirements="false")  # a queued task no pilot may run still needs its files
    matcher.add_task(QueuedTask(1, never, inputs=("/a", "/x")))
    matcher.add_task(QueuedTask(2, MatchSpec(), inputs=("/a", "/b")))
    matcher.add_pilot(PilotInfo(1, cached={"/a", "/b", "/c"}))
    assert sorted(matcher.needed_cached(1, 1000) or ()) == ["/a", "/b"]
    bounded = matcher.needed_cached(1, 1)  # at most ``limit``
    assert bounded is not None and len(bounded) == 1 and bounded[0] in ("/a", "/b")
    assert matcher.needed_cached(1, 1000, cached=["/x", "/c"]) == ("/x",)  # a new list
    assert matcher.needed_cached(2, 1000) is None  # not held
    matcher.remove_task(2)
    assert matcher.needed_cached(1, 1000) == ("/a",)
    matcher.remove_task(1)
    assert matcher.needed_cached(1, 1000) == ()


def test_a_bare_name_reads_the_pilots_attribute_as_htcondor_matchmaking_does() -> None:
    # A job's "Memory >= 2000" means the machine's Memory (the task has none): the compiled
    # evaluator, its columns and classad2 all resolve it so, whatever the process read before.
    matcher = Matcher()
    spec = MatchSpec(requirements="Memory >= 2000 && Cpus >= RequestCpus", rank="Memory")
    matcher.add_task(QueuedTask(1, spec))
    small = PilotInfo(1, site="T2", se="se", host="a", cpus=2, memory=1000, disk=100)
    large = PilotInfo(2, site="T2", se="se", host="b", cpus=2, memory=4000, disk=100)
    for pilot in (small, large):
        matcher.add_pilot(pilot)
        matcher.set_idle(pilot.pilot_id, True)
    assert classads.symmetric_match(task_ad(spec), pilot_ad(large))
    assert not classads.symmetric_match(task_ad(spec), pilot_ad(small))
    assert classads.rank(task_ad(spec), pilot_ad(large)) == 4000.0
    assert matcher.choose(1, now=0.0) is None
    chosen = matcher.choose(2, now=0.0)
    assert chosen is not None and chosen.task_id == 1


def test_calls_hidden_from_a_text_search_make_their_group_and_pilot_costly() -> None:
    """A comment before the parenthesis, a quoted name, ``eval`` of a built text: each is a call
    (``tq.client.limits.costly_calls``), so the matcher never evaluates the pair itself."""
    hidden = [
        'regexp/**/("^(a|aa)+$", TARGET.Site)',
        "'regexp'(\"^T\", TARGET.Site)",
        'eval(strcat("reg", "exp(\\"^T\\", TARGET.Site)"))',
    ]
    for text in hidden:
        matcher = Matcher(defer_costly=True)
        matcher.add_task(QueuedTask(1, MatchSpec(requirements=text)))
        matcher.add_pilot(PilotInfo(1, site="T1", host="h", cpus=4))
        assert matcher.choose(1, 0.0) is None and matcher.evaluations == 0, text
        assert len(matcher.pending_costly(1, 0.0)) == 1, text
        pilot = Matcher(defer_costly=True)
        pilot.add_task(QueuedTask(1, MatchSpec(requirements="true")))
        pilot.add_pilot(PilotInfo(1, site="T1", host="h", cpus=4, requirements=text))
        assert pilot.choose(1, 0.0) is None and pilot.evaluations == 0, text


def test_a_pairs_check_reads_the_matchers_verdict_and_still_says_why_not() -> None:
    """``store.offers.mismatch`` (a master's pair): with the matcher's cached verdict
    (``known_verdict``) where it holds the pilot and the group, the same answer as the ads
    evaluated afresh; a refusal still names the side whose Requirements fail."""
    from glidein_ext.tq.service.store.offers import ads_mismatch, mismatch

    tasks, pilots = _varied(4)
    matcher = Matcher()  # costly pairs evaluated inline here (no deferral)
    for task in tasks[:200]:
        matcher.add_task(task)
    for pilot in pilots[:30]:
        matcher.add_pilot(pilot)
    known = refused = 0
    for task in tasks:
        for pilot in pilots:
            key = task.spec.key()
            verdict = matcher.known_verdict(pilot.pilot_id, key)
            held = task.task_id <= 200 or any(o.spec.key() == key for o in tasks[:200])
            if pilot.pilot_id > 30 or not held:
                assert verdict is None  # a pilot or group it does not hold
            else:
                known += 1
                assert verdict == matcher.verdict(pilot.pilot_id, key)
            if verdict is not None:  # Requirements both ways, as the ads say
                assert verdict.matched == (ads_mismatch(task.spec, pilot) is None)
            why = mismatch(task.spec, pilot, 0.0, matcher=matcher)
            assert why == mismatch(task.spec, pilot, 0.0)  # the same, reason and all
            refused += why is not None
    assert known > 1000 and 0 < refused < len(tasks) * len(pilots)
    deferred = Matcher(defer_costly=True)
    costly_task = next(t for t in tasks if "regexp" in t.spec.requirements)
    deferred.add_task(costly_task)
    deferred.add_pilot(pilots[0])
    assert deferred.known_verdict(pilots[0].pilot_id, costly_task.spec.key()) is None
