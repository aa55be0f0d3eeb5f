"""ClassAd values as the compiled subset of expressions (``compiled``) holds them, and their
semantics on one value: UNDEFINED and ERROR, the truth of a value, comparison, identity,
arithmetic and the non-strict logical operators.

The semantics are classad2's, found by asking it (``tests/unit/tq/service/matching/
test_tq_compiled.py`` compares the two on random expressions and ads):
- ERROR and UNDEFINED propagate through comparisons and arithmetic, ERROR first;
- ``&&`` and ``||`` are non-strict (``false && error`` is false, ``undefined || true`` true) and
  read numbers as booleans (non-zero is true); a string there is ERROR;
- ``==`` compares strings case-insensitively (ASCII only, byte-wise), ``=?=`` case-sensitively and
  never gives UNDEFINED or ERROR (values of different types are not identical, 1 =?= 1.0 is false);
- booleans count as 0 and 1 in comparisons and binary arithmetic, but unary minus of one is ERROR;
- integers are 64-bit and wrap; an integer division truncates, by zero it is ERROR; a binary real
  operation that gives +infinity is ERROR (-infinity and NaN are values);
- a bare name is MY's attribute, else TARGET's: HTCondor's matchmaking, which the ClassAd library
  applies process-wide once an old-syntax ad was read; ``classads.matchmaking_semantics`` sets it
  on purpose (the matcher does), so classad2 and the compiled evaluator always agree.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from typing import Any


class Special:
    """UNDEFINED or ERROR."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


UNDEFINED = Special("UNDEFINED")
ERROR = Special("ERROR")

Value = bool | int | float | str | Special
Ad = Mapping[str, Value]  # lower-case attribute name -> value

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
_INF = math.inf

# The operators on two operands already brought to one type (numbers, folded strings; one value
# each or numpy columns), by their ClassAd spelling; division is apart: it differs by type.
COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
RING_OPERATIONS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
}

# --- semantics on one value ---


def _wrap(value: int) -> int:
    if INT_MIN <= value <= INT_MAX:
        return value
    return (value - INT_MIN) % 2**64 + INT_MIN


def truth(value: Value) -> Value:
    """A value read as a boolean by && || ! and ?: : True, False, UNDEFINED or ERROR."""
    kind = type(value)
    if kind is bool:
        return value
    if kind is int or kind is float:
        return value != 0
    if value is UNDEFINED:
        return UNDEFINED
    return ERROR


def _fold(value: str) -> str | bytes:
    return value.lower() if value.isascii() else value.encode().lower()


def compare(op: str, left: Value, right: Value) -> Value:
    """``left op right`` for == != < <= > >=."""
    if left is ERROR or right is ERROR:
        return ERROR
    if left is UNDEFINED or right is UNDEFINED:
        return UNDEFINED
    a: object
    b: object
    if type(left) is str:
        if type(right) is not str:
            return ERROR
        a, b = _fold(left), _fold(right)
        if type(a) is not type(b):
            a, b = left.encode().lower(), right.encode().lower()
    elif type(right) is str:
        return ERROR
    elif type(left) is float or type(right) is float:
        a, b = float(left), float(right)  # type: ignore[arg-type]
    else:
        a, b = int(left), int(right)  # type: ignore[arg-type]
    found: bool = COMPARISONS[op](a, b)
    return found


def identical(left: Value, right: Value) -> bool:
    """``left =?= right``."""
    if isinstance(left, Special) or isinstance(right, Special):
        return left is right
    if type(left) is not type(right):
        return False
    return left == right


def _divide_reals(a: float, b: float) -> float:
    if b != 0:
        return a / b
    if a == 0 or math.isnan(a):
        return math.nan
    return math.copysign(_INF, a) * math.copysign(1.0, b)


def arithmetic(op: str, left: Value, right: Value) -> Value:
    """``left op right`` for + - * /."""
    if left is ERROR or right is ERROR:
        return ERROR
    if left is UNDEFINED or right is UNDEFINED:
        return UNDEFINED
    if type(left) is str or type(right) is str:
        return ERROR
    if type(left) is not float and type(right) is not float:
        a, b = int(left), int(right)  # type: ignore[arg-type]
        ring = RING_OPERATIONS.get(op)
        if ring is not None:
            return _wrap(ring(a, b))
        if b == 0:
            return ERROR
        if a == INT_MIN and b == -1:
            return INT_MAX
        quotient = abs(a) // abs(b)
        return quotient if (a < 0) == (b < 0) else -quotient
    x, y = float(left), float(right)  # type: ignore[arg-type]
    ring = RING_OPERATIONS.get(op)
    result: float = _divide_reals(x, y) if ring is None else ring(x, y)
    return ERROR if result == _INF else result


def negate(value: Value) -> Value:
    """Unary minus."""
    kind = type(value)
    if kind is int or kind is float:
        negative: Any = -value  # type: ignore[operator]
        return _wrap(negative) if kind is int else negative
    if value is UNDEFINED:
        return UNDEFINED
    return ERROR


def logical_not(value: Value) -> Value:
    test = truth(value)
    return (not test) if type(test) is bool else test


def logical_junction(left: Value, right: Value, disjunction: bool) -> Value:
    """``left || right`` (``disjunction``) or ``left && right`` on the two truths, non-strict:
    a decisive left (true for ``||``, false for ``&&``) or ERROR is the answer, the other
    boolean gives ``right``; an UNDEFINED left gives a decisive right, UNDEFINED for the other
    boolean, else ``right``."""
    decisive = disjunction
    if left is decisive:
        return decisive
    if left is ERROR:
        return ERROR
    if left is (not decisive):
        return right
    # UNDEFINED
    if right is decisive:
        return decisive
    return UNDEFINED if right is (not decisive) else right


def lower_ad(attributes: Mapping[str, object]) -> dict[str, Value]:
    """An ad's plain attributes keyed by lower-case name, the later of two spellings winning
    (as ``ClassAd`` does)."""
    found: dict[str, Value] = {}
    for name, value in attributes.items():
        if isinstance(value, (bool, int, float, str)):
            found[name.lower()] = value
    return found


def plain(ad: Ad) -> bool:
    """Whether every integer of the ad fits 64 bits (otherwise classad2 evaluates it: what it
    makes of a larger one is its own)."""
    return all(type(v) is not int or INT_MIN <= v <= INT_MAX for v in ad.values())


def matches(value: Value) -> bool:
    """Whether a Requirements value lets a match happen (true, or a non-zero number)."""
    return truth(value) is True


def rank_value(value: Value) -> float:
    """A Rank value as the matcher ranks it: a number, a boolean as 1.0/0.0, else 0.0."""
    kind = type(value)
    if kind is bool:
        return 1.0 if value else 0.0
    if kind is int or kind is float:
        return float(value)  # type: ignore[arg-type]
    return 0.0
