"""The common subset of ClassAd expressions, compiled once into Python closures (Hasham 2011 §IV-E:
Requirements and Rank are evaluated for every match group; DIRAC's TaskQueueDB matches on indexed
fields instead of evaluating ClassAds).

The subset and its parser are ``classad_parse``; the values and their semantics
``classad_values``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from glidein_ext.tq.service.matching.classad_parse import Node, parse
from glidein_ext.tq.service.matching.classad_values import (
    ERROR,
    UNDEFINED,
    Ad,
    Value,
    arithmetic,
    compare,
    identical,
    logical_junction,
    logical_not,
    negate,
    truth,
)

Evaluator = Callable[[Ad, Ad], Value]  # (MY, TARGET) -> value

# --- closures ---


def _junction(disjunction: bool, a: Evaluator, b: Evaluator) -> Evaluator:
    """``a || b`` (``disjunction``) or ``a && b``: ``b`` is not evaluated where ``a``'s truth
    decides (true for ``||``, false for ``&&``; or ERROR)."""
    decisive = disjunction

    def junction(my: Ad, target: Ad) -> Value:
        left = truth(a(my, target))
        if left is decisive or left is ERROR:
            return left
        return logical_junction(left, truth(b(my, target)), disjunction)

    return junction


def _closure(node: Node) -> Evaluator:
    kind = node[0]
    if kind == "lit":
        constant: Value = node[1]
        return lambda my, target: constant
    if kind == "my":
        name: str = node[1]
        return lambda my, target: my.get(name, UNDEFINED)
    if kind == "target":
        other: str = node[1]
        return lambda my, target: target.get(other, UNDEFINED)
    if kind == "bare":  # HTCondor's matchmaking: MY's attribute, else TARGET's
        bare: str = node[1]
        return lambda my, target: my[bare] if bare in my else target.get(bare, UNDEFINED)
    if kind == "un":
        inner = _closure(node[2])
        if node[1] == "-":
            return lambda my, target: negate(inner(my, target))
        return lambda my, target: logical_not(inner(my, target))
    if kind in ("and", "or"):
        return _junction(kind == "or", _closure(node[1]), _closure(node[2]))
    if kind == "cond":
        test, yes, no = _closure(node[1]), _closure(node[2]), _closure(node[3])

        def conditional(my: Ad, target: Ad) -> Value:
            chosen = truth(test(my, target))
            if chosen is True:
                return yes(my, target)
            if chosen is False:
                return no(my, target)
            return chosen

        return conditional
    op: str = node[1]
    a, b = _closure(node[2]), _closure(node[3])
    if op == "=?=":
        return lambda my, target: identical(a(my, target), b(my, target))
    if op == "=!=":
        return lambda my, target: not identical(a(my, target), b(my, target))
    if op in ("+", "-", "*", "/"):
        return lambda my, target: arithmetic(op, a(my, target), b(my, target))
    return lambda my, target: compare(op, a(my, target), b(my, target))


@dataclass(frozen=True)
class Compiled:
    """One expression of the subset: its tree and its closure."""

    text: str
    tree: Node
    evaluate: Evaluator

    @property
    def uses_target(self) -> bool:
        """Whether it reads the other ad (otherwise its value is the same for every TARGET)."""
        return _uses_target(self.tree)


def _uses_target(node: Node) -> bool:
    if node[0] in ("target", "bare"):  # a bare name MY lacks is TARGET's
        return True
    return any(_uses_target(child) for child in node[1:] if isinstance(child, tuple))


@lru_cache(maxsize=65536)
def compile_expr(text: str) -> Compiled | None:
    """The compiled expression, or None when ``text`` is outside the subset (use classad2)."""
    tree = parse(text)
    if tree is None:
        return None
    return Compiled(text, tree, _closure(tree))
