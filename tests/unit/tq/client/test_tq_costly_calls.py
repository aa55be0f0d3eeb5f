"""Costly ClassAd calls counted on the expression's tokens (``tq.client.limits.costly_calls``):
comments, white space, quoted names and ``eval`` hide no call, and strings hold none."""

from __future__ import annotations

import importlib.util

import pytest

from glidein_ext.tq.client.limits import MAX_COSTLY_CALLS, costly_calls, expr_problem, is_costly

# The Python 3.9 chroot (scripts/py39-chroot) has no classad2: the counts are checked all the same.
HAVE_CLASSAD2 = importlib.util.find_spec("classad2") is not None
SLOW = '"^(a|aa)+$", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!"'


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("TARGET.Memory >= 2000", 0),
        ('strcat("a", "b") == "ab" && size(MY.x) > 0 && member(1, {1, 2})', 0),
        ('versionCmp("1.2", "1.3") < 0 && join(",", split("a b")) == "a,b"', 0),
        (f"regexp({SLOW})", 1),
        (f"regexp/**/({SLOW})", 1),  # a comment between the name and its parenthesis
        (f"regexp /* ( */ \t\n ({SLOW})", 1),
        (f"regexp // a line comment\n ({SLOW})", 1),
        (f"RegExp ({SLOW})", 1),  # names are case-insensitive
        (f"'regexp'({SLOW})", 1),  # a quoted name is a name, and may be called
        (f"'reg\\145xp'({SLOW})", 1),  # with an escape: the lexer's octal e
        ('eval(strcat("reg", "exp(\\"^(a|aa)+$\\", \\"aaaa!\\")"))', 1),  # its text: any call
        (f'stringListRegexpMember({SLOW}) || replaceAll({SLOW}, "x")', 2),
        (f"[a = regexp({SLOW})].a", 1),  # inside a nested ad
        ('someFunctionNotKnown("x")', 1),  # whatever is not known is costly
        ('"regexp(\\"a\\", \\"b\\")" == MY.x', 0),  # inside a string it is no call
        ("x is (undefined) && y isnt (error)", 0),  # operators, not calls
        ('/* regexp("a", "b") */ true', 0),  # inside a comment, neither
    ],
)
def test_costly_calls_are_counted_on_the_tokens(text: str, count: int) -> None:
    if HAVE_CLASSAD2:
        from glidein_ext import classads

        classads.parse_expr(text)  # classad2 parses every one of them: none is a straw man
    assert costly_calls(text) == count
    assert is_costly(text) == (count > 0)


def test_a_call_glued_to_a_number_is_counted_too() -> None:
    """Not valid ClassAd (refused at the door), but no call may hide behind a number."""
    for text in ('x || 1regexp("a", "b")', 'x || 0x1Fregexp("a", "b")'):
        assert costly_calls(text) == 1, text
    assert costly_calls("2.5e3 > 1.5 && 3 > (2)") == 0  # numbers are no names


def test_an_unclosed_string_or_comment_is_not_understood() -> None:
    for text in ('regexp("a", "b) ', "true /* regexp(", '\'regexp("a", "b")'):
        assert costly_calls(text) is None
        assert is_costly(text)  # whatever is not understood is costly
        assert expr_problem(text) is not None


@pytest.mark.parametrize(
    "call",
    [
        f"regexp/**/({SLOW})",
        'eval(strcat("reg", "exp(\\"a\\", \\"a\\")"))',
        f"'regexp' ({SLOW})",
    ],
)
def test_more_hidden_calls_than_the_bound_are_refused(call: str) -> None:
    assert costly_calls(" || ".join([call] * MAX_COSTLY_CALLS)) == MAX_COSTLY_CALLS
    if HAVE_CLASSAD2:
        assert expr_problem(" || ".join([call] * MAX_COSTLY_CALLS)) is None
    problem = expr_problem(" || ".join([call] * (MAX_COSTLY_CALLS + 1)))
    assert problem is not None and "costly calls" in problem
