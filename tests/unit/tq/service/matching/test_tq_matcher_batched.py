"""Match groups evaluated together (one template, numpy columns) answer as classad2 does one group
at a time: the batch's values row by row, and the matcher's choices against the naive answer."""

from __future__ import annotations

import math
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glidein_ext import classads
from glidein_ext.tq.models import MatchSpec, PilotInfo, QueuedTask
from glidein_ext.tq.service.matching import batched, columns
from glidein_ext.tq.service.matching import matcher as matcher_module
from glidein_ext.tq.service.matching.classad_values import (
    Value,
    lower_ad,
    matches,
    plain,
    rank_value,
)
from glidein_ext.tq.service.matching.compiled import compile_expr
from glidein_ext.tq.service.matching.match_groups import pilot_ad, task_ad
from glidein_ext.tq.service.matching.matcher import Matcher
from tests.unit.tq.service.matching.test_tq_compiled import TRICKY, _same

HOLE = "{}"
NAMES = ["a", "B", "Cpus", "Memory", "RequestCpus", "Site"]
LITERALS = st.one_of(
    st.integers(-3, 3).map(str),
    st.sampled_from(["9223372036854775807", "0.0", "0.5", "2.5", "1e308", "true", "false"]),
    st.sampled_from(["undefined", "error", '"a"', '"A"', '"b"', '"é"', '""']),
)
SCALARS = st.one_of(
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([2**63 - 1, -(2**63), 0.0, -0.0, 2.5, 1e308, math.inf, -math.inf]),
    st.sampled_from(["a", "A", "b", "é", "", "T1"]),
)
ADS = st.dictionaries(st.sampled_from(NAMES), SCALARS, max_size=4)
REFERENCES = st.builds(
    lambda scope, name: f"{scope}{name}",
    st.sampled_from(["", "MY.", "TARGET.", "target."]),
    st.sampled_from(NAMES),
)
BINARY = ["==", "!=", "<", "<=", ">", ">=", "=?=", "=!=", "&&", "||", "+", "-", "*", "/"]


def _extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.builds(lambda a, op, b: f"({a} {op} {b})", children, st.sampled_from(BINARY), children),
        st.builds(lambda op, a: f"{op}({a})", st.sampled_from(["-", "!"]), children),
        st.builds(lambda c, a, b: f"({c} ? {a} : {b})", children, children, children),
    )


# Skeletons: expressions whose holes take a different literal in each group.
SKELETONS = st.deferred(
    lambda: st.recursive(st.one_of(st.just(HOLE), REFERENCES), _extend, max_leaves=6)
)


def _fill(skeleton: str, literals: list[str]) -> str:
    parts = skeleton.split(HOLE)
    holes = len(parts) - 1
    filled = [literals[i % len(literals)] for i in range(holes)]
    return "".join(part + (filled[i] if i < holes else "") for i, part in enumerate(parts))


ROWS = st.lists(st.tuples(st.lists(LITERALS, min_size=6, max_size=6), ADS), min_size=1, max_size=12)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SKELETONS, ROWS, ADS)
def test_a_batch_answers_row_by_row_as_the_compiled_expression(
    skeleton: str, rows: list[tuple[list[str], dict[str, object]]], target: dict[str, object]
) -> None:
    """Rows of one template evaluated as columns equal each row evaluated alone (which equals
    classad2: test_tq_compiled)."""
    target_values = lower_ad(target)
    batches: dict[object, tuple[batched.Batch, list[Value]]] = {}
    for row, (literals, my) in enumerate(rows):
        text = _fill(skeleton, literals)
        expr = compile_expr(text)
        if expr is None:
            continue
        my_values = lower_ad(my)
        params: list[object] = []
        shape = batched.template(expr.tree, my_values, params)  # type: ignore[arg-type]
        if shape is None:
            continue
        kinds = [columns.kind_of(value) for value in params]  # type: ignore[arg-type]
        key = (shape, tuple(kinds))
        if key not in batches:
            batches[key] = (batched.Batch(len(batches), shape, ("p", 0, "i"), kinds), [])
        batch, expected = batches[key]
        batch.add(f"g{row}", params, (1, 0, 0, 0))  # type: ignore[arg-type]
        value = expr.evaluate(my_values, target_values)
        expected.append(value)
    for batch, expected in batches.values():
        # The template as both Requirements and (here) a constant Rank: check its truths and,
        # through a second batch sharing the columns, its ranks.
        n = len(batch)
        try:
            got = columns.evaluate(batch.requirements, batch._columns_for(0, n), target_values, n)
        except columns.Unbatchable:
            continue  # rows of mixed types: the matcher evaluates them one by one
        for mine, theirs in zip(columns.values(got, n), expected, strict=True):
            assert _same(mine, theirs), (mine, theirs)
        assert list(columns.truths(got, n)) == [matches(value) for value in expected]
        ranks = list(columns.ranks(got, n))
        for mine_rank, value in zip(ranks, expected, strict=True):
            theirs_rank = rank_value(value)
            assert (math.isnan(mine_rank) and math.isnan(theirs_rank)) or mine_rank == theirs_rank


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SKELETONS, st.lists(LITERALS, min_size=6, max_size=6), ADS, st.lists(ADS, max_size=10))
def test_a_pilot_expression_over_the_rows_answers_as_the_compiled_expression(
    skeleton: str, literals: list[str], pilot: dict[str, object], rows: list[dict[str, object]]
) -> None:
    """A pilot's expression with the groups as TARGET: its TARGET references read the rows'
    attributes as columns (UNDEFINED where a row lacks one)."""
    expr = compile_expr(_fill(skeleton, literals))
    if expr is None:
        return
    mine, ads = lower_ad(pilot), [lower_ad(row) for row in rows]
    tree = batched.mirrored(expr.tree, mine)
    try:
        got = columns.evaluate(tree, [], {}, len(ads), ads)
    except columns.Unbatchable:
        return  # rows of mixed types: the matcher evaluates them one by one
    for value, ad in zip(columns.values(got, len(ads)), ads, strict=True):
        assert _same(value, expr.evaluate(mine, ad)), (value, ad)


@pytest.mark.parametrize("text", TRICKY)
def test_tricky_cases_as_columns_equal_the_compiled_values(text: str) -> None:
    """Each tricky case as a template over rows whose MY.x differs (an int, a real, ...)."""
    expr = compile_expr(text)
    assert expr is not None
    target = lower_ad({"x": 2, "y": "z"})
    for my_x in (1, 0, -(2**63), 2.5, 0.0, "a", True):
        rows = [lower_ad({"x": my_x}), lower_ad({"x": my_x})]
        params: list[Value] = []
        shape = batched.template(expr.tree, rows[0], params)
        assert shape is not None
        batch = batched.Batch(0, shape, ("p", 0, "i"), [columns.kind_of(v) for v in params])
        batch.add("a", params, (1, 0, 0, 0))
        batch.add("b", params, (1, 0, 0, 0))
        try:
            got = columns.evaluate(shape, batch._columns_for(0, 2), target, 2)
        except columns.Unbatchable:
            continue
        expected = expr.evaluate(rows[0], target)
        assert all(_same(mine, expected) for mine in columns.values(got, 2)), (my_x, expected)


def _naive_best(tasks: dict[int, QueuedTask], pilot: PilotInfo) -> tuple[int, float, float] | None:
    """The best task by classad2 on each task's own ad: (task id, pilot's Rank, task's Rank)."""
    best: tuple[tuple[float, float, int, int], int, float, float] | None = None
    for task_id, pr, tr in _matching_ranks(tasks, pilot):
        order = (-pr, -tr, -tasks[task_id].priority, task_id)
        if best is None or order < best[0]:
            best = (order, task_id, pr, tr)
    return None if best is None else best[1:]


def _matching_ranks(
    tasks: dict[int, QueuedTask], pilot: PilotInfo
) -> list[tuple[int, float, float]]:
    """Each task that matches the pilot: (task id, pilot's Rank, task's Rank), by classad2."""
    p_ad = pilot_ad(pilot)
    found = []
    for task in tasks.values():
        spec = task.spec
        if spec.request_cpus > pilot.cpus or spec.request_memory > pilot.memory:
            continue
        t_ad = task_ad(spec)
        if t_ad.symmetricMatch(p_ad):
            found.append((task.task_id, classads.rank(p_ad, t_ad), classads.rank(t_ad, p_ad)))
    return found


REQUIREMENT_SKELETONS = [
    "(TARGET.Site == {} || TARGET.Memory >= {}) && TARGET.Cpus >= MY.RequestCpus",
    "TARGET.Memory > {} * MY.a",
    "MY.B =?= {} || TARGET.a != {}",
    "(TARGET.Cpus > {}) ? (MY.a < {}) : (TARGET.B == {})",
    "!(TARGET.a / {} > {})",
    "regexp({}, TARGET.Site)",
    "{}",
]
RANK_SKELETONS = ["TARGET.Memory / {} + {}", "{}", "MY.a * {} - TARGET.a", "TARGET.Cpus > {}"]
TASK_LITERALS = st.sampled_from(
    ['"T1"', '"t2"', "1000", "3000", "2", "0", "2.5", "-1", "true", "undefined", '"x"']
)
PILOT_REQUIREMENTS = [
    "true",
    "MY.Cpus > 1",
    "TARGET.RequestCpus <= 2",
    "1",
    "TARGET.a =!= 2",
    'TARGET.RequestCpus <= MY.Cpus && (TARGET.B == "a" || TARGET.RequestMemory < MY.Memory)',
    "TARGET.a > 0 ? TARGET.a < 3 : TARGET.B =?= undefined",
    'regexp("^T", TARGET.B)',
]
PILOT_RANKS = ["0", "MY.Memory", "TARGET.a", "-1.5", "TARGET.RequestMemory / 1000 + MY.Cpus"]


def _task(task_id: int, data: st.DataObject) -> QueuedTask:
    requirements = _fill(
        data.draw(st.sampled_from(REQUIREMENT_SKELETONS)),
        data.draw(st.lists(TASK_LITERALS, min_size=3, max_size=3)),
    )
    rank = _fill(
        data.draw(st.sampled_from(RANK_SKELETONS)),
        data.draw(st.lists(TASK_LITERALS, min_size=2, max_size=2)),
    )
    attributes = tuple(
        data.draw(st.dictionaries(st.sampled_from(["a", "B"]), SCALARS, max_size=2)).items()
    )
    spec = MatchSpec(
        requirements=requirements,
        rank=rank,
        request_cpus=data.draw(st.sampled_from([1, 2, 4])),
        request_memory=data.draw(st.sampled_from([0, 3000])),
        attributes=attributes,
    )
    return QueuedTask(task_id, spec, priority=data.draw(st.integers(0, 2)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_choices_equal_the_naive_classad2_choice_as_tasks_come_and_go(data: st.DataObject) -> None:
    """Every choice is the task classad2 ranks best on each task's own ad, while tasks are
    added (batches grow), taken and removed (rows die, batches compact)."""
    matcher = Matcher()
    matcher_batch_grow = batched.Batch._GROW
    batched.Batch._GROW = 4  # compact early
    try:
        tasks: dict[int, QueuedTask] = {}
        next_id = 1
        for _ in range(data.draw(st.integers(5, 40))):
            tasks[next_id] = _task(next_id, data)
            matcher.add_task(tasks[next_id])
            next_id += 1
        pilots = []
        for pilot_id in range(1, 4):
            pilot = PilotInfo(
                pilot_id,
                site=data.draw(st.sampled_from(["T1", "t2", "T3"])),
                cpus=data.draw(st.sampled_from([1, 2, 8])),
                memory=data.draw(st.sampled_from([2000, 4000])),
                attributes=data.draw(st.dictionaries(st.sampled_from(["a", "B"]), SCALARS)),
                requirements=data.draw(st.sampled_from(PILOT_REQUIREMENTS)),
                rank=data.draw(st.sampled_from(PILOT_RANKS)),
            )
            matcher.add_pilot(pilot)
            pilots.append(pilot)
        for _ in range(12):
            pilot = data.draw(st.sampled_from(pilots))
            expected = _naive_best(tasks, pilot)
            choice = matcher.choose(pilot.pilot_id, 0.0)
            ranks = _matching_ranks(tasks, pilot)
            if any(math.isnan(pr) or math.isnan(tr) for _, pr, tr in ranks):
                assert choice is not None  # NaN ranks: any matching task (the heap's order)
            elif expected is None:
                assert choice is None
            else:
                assert choice is not None
                assert (choice.task_id, choice.pilot_rank, choice.task_rank) == expected
            action = data.draw(st.sampled_from(["take", "add", "remove"]))
            if action == "take" and choice is not None:
                matcher.remove_task(choice.task_id)
                del tasks[choice.task_id]
            elif action == "add":
                for _ in range(data.draw(st.integers(1, 6))):
                    tasks[next_id] = _task(next_id, data)
                    matcher.add_task(tasks[next_id])
                    next_id += 1
            elif action == "remove" and tasks:
                for task_id in data.draw(st.lists(st.sampled_from(sorted(tasks)), max_size=8)):
                    if task_id in tasks:
                        matcher.remove_task(task_id)
                        del tasks[task_id]
    finally:
        batched.Batch._GROW = matcher_batch_grow


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_few_groups_one_by_one_choose_as_their_batches_would(data: st.DataObject) -> None:
    """Up to ``FEW_GROUPS`` groups are ordered one by one, not on the batches' columns: the same
    choices, taken one after another, as with the batches ordering them."""
    specs = [_task(task_id, data) for task_id in range(1, data.draw(st.integers(1, 30)))]
    pilot = PilotInfo(
        1,
        site=data.draw(st.sampled_from(["T1", "t2"])),
        cpus=data.draw(st.sampled_from([1, 2, 8])),
        memory=data.draw(st.sampled_from([2000, 4000])),
        requirements=data.draw(st.sampled_from(PILOT_REQUIREMENTS)),
        rank=data.draw(st.sampled_from(PILOT_RANKS)),
    )
    if any(
        math.isnan(pr) or math.isnan(tr)
        for _, pr, tr in _matching_ranks({task.task_id: task for task in specs}, pilot)
    ):
        return  # NaN ranks: any matching task, in either order
    few = matcher_module.FEW_GROUPS
    chosen = []
    try:
        for matcher_module.FEW_GROUPS in (few, 0):  # one by one, then on the columns
            matcher = Matcher()
            for task in specs:
                matcher.add_task(task)
            matcher.add_pilot(pilot)
            order = []
            while (choice := matcher.choose(1, 0.0)) is not None:
                order.append((choice.task_id, choice.pilot_rank, choice.task_rank))
                matcher.remove_task(choice.task_id)
            chosen.append(order)
    finally:
        matcher_module.FEW_GROUPS = few
    assert chosen[0] == chosen[1]


def test_one_template_with_other_constants_shares_one_batch_and_one_evaluation() -> None:
    matcher = Matcher()
    for task_id in range(1, 101):
        spec = MatchSpec(
            requirements=f'TARGET.Site == "S{task_id % 7}" || TARGET.Memory >= {task_id * 40}',
            rank=f"TARGET.Memory / 1000 + {task_id % 5}",
        )
        matcher.add_task(QueuedTask(task_id, spec))
    matcher.add_pilot(PilotInfo(1, site="S3", memory=2000))
    choice = matcher.choose(1, 0.0)
    # Rank 2 + 4 at best: task ids 4, 9, ... (id % 5 == 4) that match: site S3 or id <= 50.
    assert choice is not None and choice.task_id == 4 and choice.task_rank == 6.0
    assert matcher.evaluations == 100  # one template: one pass over its 100 groups
    assert matcher.choose(1, 0.0) == choice and matcher.evaluations == 100  # cached


def test_string_names_and_keywords_stay_outside_the_batch_when_not_in_the_subset() -> None:
    matcher = Matcher()
    matcher.add_task(QueuedTask(1, MatchSpec(requirements='regexp("^T", TARGET.Site)')))
    matcher.add_task(QueuedTask(2, MatchSpec(requirements='TARGET.Site == "T1"', rank="1")))
    matcher.add_pilot(PilotInfo(1, site="T1"))
    choice = matcher.choose(1, 0.0)
    assert choice is not None and choice.task_id == 2
    assert set(string.ascii_letters)  # the alphabet is there (keeps the import honest)


def test_an_integer_past_64_bits_is_not_a_plain_value() -> None:
    """classad2 refuses such an attribute (the ad is never made); the compiled path would not
    wrap it as classad2 does its 64-bit integers, so it keeps off it."""
    assert plain({"a": 2**63 - 1, "b": -(2**63), "c": "x", "d": 2.5})
    assert not plain({"a": 2**63})


def test_many_rows_are_ordered_by_the_pilots_rank_then_the_groups_as_classad2_would() -> None:
    """Over 64 candidates in one batch (ordered on the columns, not sorted one by one), with a
    pilot whose Requirements and Rank read the groups, taken one after another."""
    tasks = {
        i: QueuedTask(
            i,
            MatchSpec(
                requirements=f"TARGET.Cpus >= {i % 3} && MY.Prio != {i % 11}",
                rank=f"{i % 5} - MY.Prio / 10.0",
                attributes=(("Prio", i % 7),),
            ),
            priority=i % 2,
        )
        for i in range(1, 301)
    }
    matcher = Matcher()
    for task in tasks.values():
        matcher.add_task(task)
    pilot = PilotInfo(1, cpus=2, requirements="TARGET.Prio < 6", rank="TARGET.Prio * 2")
    matcher.add_pilot(pilot)
    assert matcher.group_count == 300
    for _ in range(40):
        expected = _naive_best(tasks, pilot)
        choice = matcher.choose(1, 0.0)
        assert choice is not None and expected is not None
        assert (choice.task_id, choice.pilot_rank, choice.task_rank) == expected
        matcher.remove_task(choice.task_id)
        del tasks[choice.task_id]
    assert matcher.evaluations == 300  # one pass over the template's rows, for both sides
