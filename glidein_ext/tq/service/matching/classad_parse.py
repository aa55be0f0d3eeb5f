"""The tokenizer and parser of the common subset of ClassAd expressions (``compiled``).

The subset: literals (integer, real, string without escapes, true, false, undefined, error),
attribute references (``MY.x``, ``TARGET.x``, bare ``x``; names case-insensitive), comparisons
(``== != < <= > >= =?= =!= is isnt``), ``&& || !``, ``+ - * /``, unary minus, parentheses and
``c ? a : b``.  ``compile_expr`` returns None for anything else (function calls, lists, nested
ads, escapes, ...): the caller evaluates that with classad2.
"""

from __future__ import annotations

import re
from typing import Any

from glidein_ext.tq.service.matching.classad_values import ERROR, INT_MAX, UNDEFINED

# Names that are not plain attributes of MY in classad2's match scope: not compiled.
_RESERVED = frozenset(
    {
        "my",
        "target",
        "parent",
        "root",
        "self",
        "left",
        "right",
        "symmetricmatch",
        "leftmatchesright",
        "rightmatchesleft",
        "leftrankvalue",
        "rightrankvalue",
        "lctx",
        "rctx",
    }
)
# The attributes both match ads hold as expressions (not values): references to them are not
# compiled.
EXPRESSION_ATTRIBUTES = frozenset({"requirements", "rank"})

# --- nodes ---

# ("lit", v) ("my", name) ("target", name) ("bare", name) ("un", op, a) ("bin", op, a, b) ...
Node = tuple[Any, ...]
# ("and", a, b) ("or", a, b) ("cond", c, a, b)


class _NotInSubset(Exception):
    pass


_TOKEN = re.compile(
    r"""\s*(?:
    (?P<real>(?:\d+\.\d+|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
    |(?P<int>\d+)
    |(?P<str>"[^"\\]*")
    |(?P<name>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<op>=\?=|=!=|==|!=|<=|>=|&&|\|\||[<>+\-*/!()?:.])
    )""",
    re.VERBOSE,
)
_NAME_CHAR = re.compile(r"[A-Za-z0-9_.]")
_COMPARE = frozenset({"==", "!=", "=?=", "=!="})
_RELATION = frozenset({"<", "<=", ">", ">="})
# The binary operators by precedence, lowest first; all left-associative.
_PRECEDENCE = (
    frozenset({"||"}),
    frozenset({"&&"}),
    _COMPARE,
    _RELATION,
    frozenset({"+", "-"}),
    frozenset({"*", "/"}),
)
_JUNCTIONS = {"||": "or", "&&": "and"}  # their nodes: ("or", a, b), ("and", a, b)


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    end = len(text.rstrip())
    while pos < end:
        found = _TOKEN.match(text, pos)
        if found is None or found.lastgroup is None:
            raise _NotInSubset(text)
        kind, value = found.lastgroup, found.group(found.lastgroup)
        pos = found.end()
        if kind in ("real", "int") and pos < len(text) and _NAME_CHAR.match(text, pos):
            raise _NotInSubset(text)  # 1K, 0x10, 1.5.2
        if kind == "name":
            lower = value.lower()
            if lower in ("is", "isnt"):
                kind, value = "op", "=?=" if lower == "is" else "=!="
        tokens.append((kind, value))
    return tokens


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.pos = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ("end", "")

    def take(self) -> tuple[str, str]:
        token = self.peek()
        self.pos += 1
        return token

    def expect(self, op: str) -> None:
        if self.take() != ("op", op):
            raise _NotInSubset(op)

    def parse(self) -> Node:
        node = self.cond()
        if self.pos != len(self.tokens):
            raise _NotInSubset("trailing")
        return node

    def cond(self) -> Node:
        test = self.binary()
        if self.peek() == ("op", "?"):
            self.take()
            if self.peek() == ("op", ":"):
                raise _NotInSubset("?:")  # the elvis operator
            yes = self.cond()
            self.expect(":")
            return ("cond", test, yes, self.cond())
        return test

    def binary(self, level: int = 0) -> Node:
        """``operand (op operand)*`` for the ``level``-th of ``_PRECEDENCE``, left-associative;
        each operand is the next level's (after the last, a unary expression)."""
        if level == len(_PRECEDENCE):
            return self.unary()
        ops = _PRECEDENCE[level]
        node = self.binary(level + 1)
        while self.peek()[0] == "op" and self.peek()[1] in ops:
            op = self.take()[1]
            right = self.binary(level + 1)
            junction = _JUNCTIONS.get(op)
            node = (junction, node, right) if junction else ("bin", op, node, right)
        return node

    def unary(self) -> Node:
        if self.peek() in (("op", "-"), ("op", "!")):
            return ("un", self.take()[1], self.unary())
        return self.primary()

    def primary(self) -> Node:
        kind, value = self.take()
        if kind == "int":
            number = int(value)
            if number > INT_MAX:
                raise _NotInSubset(value)
            return ("lit", number)
        if kind == "real":
            return ("lit", float(value))
        if kind == "str":
            return ("lit", value[1:-1])
        if kind == "op" and value == "(":
            node = self.cond()
            self.expect(")")
            return node
        if kind != "name":
            raise _NotInSubset(value)
        lower = value.lower()
        keyword = {"true": True, "false": False, "undefined": UNDEFINED, "error": ERROR}
        if lower in keyword:
            return ("lit", keyword[lower])
        scope = "bare"  # MY's, or TARGET's when MY has none (classads.matchmaking_semantics)
        if lower in ("my", "target") and self.peek() == ("op", "."):
            self.take()
            scope = lower
            kind, value = self.take()
            if kind != "name" or value.lower() in keyword or value.lower() in ("is", "isnt"):
                raise _NotInSubset(value)
            lower = value.lower()
        elif lower in _RESERVED:
            raise _NotInSubset(value)
        if self.peek() in (("op", "."), ("op", "(")):
            raise _NotInSubset("selection or call")
        if lower in EXPRESSION_ATTRIBUTES:
            raise _NotInSubset(value)
        return (scope, lower)


def parse(text: str) -> Node | None:
    """The expression's tree, or None when it is outside the subset."""
    try:
        tokens = _tokens(text)
        return _Parser(tokens).parse() if tokens else None
    except (_NotInSubset, RecursionError):
        return None
