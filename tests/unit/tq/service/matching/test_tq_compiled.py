"""The compiled ClassAd subset gives classad2's values: random expressions and ads, and the
tricky cases one by one."""

from __future__ import annotations

import math
from collections.abc import Mapping

import classad2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glidein_ext import classads
from glidein_ext.tq.service.matching.classad_values import (
    ERROR,
    UNDEFINED,
    Value,
    lower_ad,
    matches,
    rank_value,
)
from glidein_ext.tq.service.matching.compiled import compile_expr

NAMES = ["a", "B", "Cpus", "site"]
SCALARS = st.one_of(
    st.booleans(),
    st.integers(-5, 5),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0.0, -0.0, 0.5, 2.5, -3.0, 1e308, -1e308, math.inf, -math.inf]),
    st.floats(-1e6, 1e6, allow_nan=False),
    st.sampled_from(["", "a", "A", "b", "B", "ab", "é", "É", "true", "1"]),
)
ADS = st.dictionaries(st.sampled_from(NAMES), SCALARS, max_size=4)


def _literal(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def _reference(name: str, scope: str, upper: bool) -> str:
    spelled = name.upper() if upper else name
    return spelled if scope == "" else f"{scope}.{spelled}"


LEAVES = st.one_of(
    st.integers(0, 10).map(str),
    st.integers(0, 2**63 - 1).map(str),
    st.sampled_from(["0.0", "0.5", "2.5", "1e308", "1.5e2", ".5", "1E3"]),
    st.sampled_from(['""', '"a"', '"A"', '"b"', '"é"', '"É"', '"ab"']),
    st.sampled_from(["true", "false", "undefined", "error", "TRUE", "Undefined"]),
    st.builds(
        _reference,
        st.sampled_from(NAMES),
        st.sampled_from(["", "MY", "TARGET", "my", "Target"]),
        st.booleans(),
    ),
)
BINARY = ["==", "!=", "<", "<=", ">", ">=", "=?=", "=!=", "is", "isnt", "&&", "||"]
BINARY += ["+", "-", "*", "/"]


def _extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.builds(lambda a, op, b: f"{a} {op} {b}", children, st.sampled_from(BINARY), children),
        st.builds(lambda op, a: f"{op}{a}", st.sampled_from(["-", "!", "- "]), children),
        st.builds(lambda c, a, b: f"{c} ? {a} : {b}", children, children, children),
        children.map(lambda a: f"({a})"),
    )


# deferred: the recursive strategy's own repr is huge (a HypothesisWarning)
EXPRESSIONS = st.deferred(lambda: st.recursive(LEAVES, _extend, max_leaves=8))


def _from_classad(value: object) -> Value:
    if isinstance(value, classad2.Value):
        return UNDEFINED if value == classad2.Value.Undefined else ERROR
    assert isinstance(value, (bool, int, float, str)), value
    return value


def _same(mine: Value, theirs: Value) -> bool:
    if type(mine) is not type(theirs):
        return False
    if isinstance(mine, float) and isinstance(theirs, float):
        if math.isnan(mine) or math.isnan(theirs):
            return math.isnan(mine) and math.isnan(theirs)
        return mine == theirs and math.copysign(1, mine) == math.copysign(1, theirs)
    return mine == theirs


def _ad(attributes: Mapping[str, object]) -> classad2.ClassAd:
    ad = classad2.ClassAd()
    for name, value in attributes.items():
        ad[name] = value
    return ad


def _classad_value(text: str, my: Mapping[str, object], target: Mapping[str, object]) -> Value:
    return _from_classad(classad2.ExprTree(text).eval(scope=_ad(my), target=_ad(target)))


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(EXPRESSIONS, ADS, ADS)
def test_compiled_values_equal_classad2_on_random_expressions_and_ads(
    text: str, my: dict[str, object], target: dict[str, object]
) -> None:
    compiled = compile_expr(text)
    if compiled is None:
        return  # outside the subset (e.g. an integer literal past 64 bits): classad2 evaluates it
    mine = compiled.evaluate(lower_ad(my), lower_ad(target))
    theirs = _classad_value(text, my, target)
    assert _same(mine, theirs), (text, my, target, mine, theirs)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(EXPRESSIONS, EXPRESSIONS, ADS, ADS)
def test_compiled_match_and_rank_equal_symmetric_match_and_rank(
    requirements: str, rank: str, my: dict[str, object], target: dict[str, object]
) -> None:
    """The matcher's reading of the values: Requirements true (or non-zero) both ways, Rank."""
    req, ranked = compile_expr(requirements), compile_expr(rank)
    if req is None or ranked is None:
        return
    task, pilot = _ad(my), _ad(target)
    task["Requirements"] = classad2.ExprTree(requirements)
    task["Rank"] = classad2.ExprTree(rank)
    pilot["Requirements"] = classad2.ExprTree("true")
    mine_my, mine_target = lower_ad(my), lower_ad(target)
    assert matches(req.evaluate(mine_my, mine_target)) == task.symmetricMatch(pilot)
    expected = classads.rank(task, pilot)
    mine = rank_value(ranked.evaluate(mine_my, mine_target))
    assert _same(mine, expected) or (math.isnan(mine) and math.isnan(expected)), (rank, my, target)


TRICKY = [
    # three-valued logic, non-strict && and ||
    "false && undefined",
    "undefined && false",
    "undefined && true",
    "true || undefined",
    "undefined || false",
    "false && error",
    "error && false",
    "true || error",
    "error || true",
    "undefined && error",
    '"x" && false',
    "5 && true",
    "0 || 0.0",
    "!undefined",
    "!error",
    '!"a"',
    "!2.5",
    # comparisons
    '"abc" == "ABC"',
    '"abc" =?= "ABC"',
    '"abc" =!= "ABC"',
    '"é" == "É"',
    '"b" < "é"',
    '"B" < "a"',
    '"a" == 1',
    "undefined == 1",
    'undefined == "a"',
    "undefined == error",
    "error == undefined",
    "undefined =?= undefined",
    "error is error",
    "undefined isnt error",
    "1 =?= 1.0",
    "1 == 1.0",
    "true == 1",
    "2 == true",
    "true =?= 1",
    "9007199254740993 == 9007199254740992.0",
    "(0.0 / 0.0) == (0.0 / 0.0)",
    "(0.0 / 0.0) =!= (0.0 / 0.0)",
    # arithmetic
    "7 / 2",
    "-7 / 2",
    "7 / -2",
    "7 / 0",
    "0 / 0",
    "7.0 / 0",
    "-1.0 / 0.0",
    "0.0 / 0",
    "1e308 * 10",
    "-1e308 * 10",
    "9223372036854775807 + 1",
    "(-9223372036854775807 - 1) / -1",
    "-(-9223372036854775807 - 1)",
    "true + 1",
    "3 - true",
    "-true",
    '-"a"',
    '"a" + "b"',
    "undefined + error",
    "undefined * 0",
    "1 + 1.5",
    # precedence and the conditional
    "1 + 2 * 3",
    "1 < 2 == true",
    "true || false && false",
    "true ? 1 : false ? 2 : 3",
    "undefined ? 1 : 2",
    '"a" ? 1 : 2',
    "0.0 ? 1 : 2",
    "true ? undefined : 1",
    # scopes
    "x",
    "MY.x",
    "TARGET.x",
    "y",
    "target.Y",
    "X + TARGET.x",
]


@pytest.mark.parametrize("text", TRICKY)
def test_tricky_cases_equal_classad2(text: str) -> None:
    my, target = {"x": 1}, {"x": 2, "y": "z"}
    compiled = compile_expr(text)
    assert compiled is not None
    mine = compiled.evaluate(lower_ad(my), lower_ad(target))
    assert _same(mine, _classad_value(text, my, target)), mine


@pytest.mark.parametrize(
    "text",
    [
        'regexp("^T", TARGET.Site)',
        "{1, 2}",
        "[a = 1].a",
        '"a\\"b"',
        "'odd name'",
        "1K",
        "0x10",
        "1.",
        "x.y",
        "TARGET.Requirements",
        "MY.Rank + 1",
        "parent.x",
        "a ?: b",
        "5 % 2",
        "+1",
        "99999999999999999999",
        "",
        "1 +",
    ],
)
def test_outside_the_subset_is_left_to_classad2(text: str) -> None:
    assert compile_expr(text) is None


def test_an_undefined_or_error_rank_ranks_zero_in_classads_rank_too() -> None:
    """classad2 gives UNDEFINED and ERROR as an IntEnum (2 and 1): not numbers."""
    for text in ("TARGET.Missing", "1 / 0"):
        ad = classads.make_ad({}, {"Rank": text})
        assert classads.rank(ad, classads.make_ad({})) == 0.0


def test_requirements_must_be_true_or_a_nonzero_number() -> None:
    assert matches(True) and matches(1) and matches(2.5)
    assert not matches(False) and not matches(0) and not matches(UNDEFINED)
    assert not matches(ERROR) and not matches("true")
    assert rank_value(True) == 1.0 and rank_value("7") == 0.0 and rank_value(UNDEFINED) == 0.0
