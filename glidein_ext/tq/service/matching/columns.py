"""ClassAd values as numpy columns: one template node of a batch (``batched``) evaluated over
all its rows at once.  The values follow classad2 exactly (``classad_values``): each row carries a
status (value, UNDEFINED, ERROR) beside its value, && and || are tables over the four truths, and
a template whose conditional would give rows of different types is left to the one-group
evaluator (``Unbatchable``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from glidein_ext.tq.service.matching import classad_values
from glidein_ext.tq.service.matching.classad_parse import Node
from glidein_ext.tq.service.matching.classad_values import (
    COMPARISONS,
    ERROR,
    INT_MAX,
    INT_MIN,
    RING_OPERATIONS,
    UNDEFINED,
    Ad,
    Special,
    Value,
)

Array = Any  # numpy arrays (numpy's own typing is not strict-mypy friendly here)

_OK, _UNDEF, _ERR = 0, 1, 2
# Truth codes: false, true, undefined, error.
_F, _T, _U, _E = 0, 1, 2, 3
_AND = np.array([[_F, _F, _F, _F], [_F, _T, _U, _E], [_F, _U, _U, _E], [_E, _E, _E, _E]], np.int8)
_OR = np.array([[_F, _T, _U, _E], [_T, _T, _T, _T], [_U, _T, _U, _E], [_E, _E, _E, _E]], np.int8)
_CODE = {True: _T, False: _F}


class Unbatchable(Exception):
    """This template cannot be evaluated column-wise for this pilot (rows of mixed types)."""


def kind_of(value: Value) -> str:
    if value is UNDEFINED:
        return "u"
    if value is ERROR:
        return "e"
    kind = type(value)
    if kind is bool:
        return "b"
    if kind is int:
        return "i"
    if kind is float:
        return "r"
    return "s"


class _Col:
    """A column of one type: values, and a status per row (None: all values)."""

    __slots__ = ("kind", "raw", "st", "val")

    def __init__(self, kind: str, val: Array, st: Array | None = None, raw: Array = None) -> None:
        self.kind = kind
        self.val = val  # strings: lower-cased UTF-8 bytes
        self.st = st
        self.raw = raw  # strings: UTF-8 bytes (for =?=)


Item = Value | _Col


def _lift(value: Value) -> _Col:
    kind = kind_of(value)
    if kind == "s":
        raw = str(value).encode()
        return _Col("s", np.bytes_(raw.lower()), None, np.bytes_(raw))
    dtype = {"b": np.bool_, "i": np.int64, "r": np.float64}[kind]
    return _Col(kind, np.asarray(value, dtype=dtype))


def _status(a: _Col, b: _Col) -> Array | None:
    if a.st is None:
        return b.st
    if b.st is None:
        return a.st
    return np.maximum(a.st, b.st)


def _number(col: _Col, real: bool) -> Array:
    if real:
        return col.val.astype(np.float64, copy=False)
    return col.val.astype(np.int64, copy=False)


def _all_error(st: Array | None, n: int, kind: str) -> Item:
    """Every row that is a value becomes ERROR."""
    if st is None:
        return ERROR
    return _Col(kind, np.zeros(n, np.int64), np.where(st == _OK, _ERR, st).astype(np.int8))


def _undefined_with(other: Item, n: int, kind: str) -> Item:
    """``UNDEFINED op other`` for a strict op: ERROR where other is ERROR, else UNDEFINED."""
    if isinstance(other, Special):
        return ERROR if other is ERROR else UNDEFINED
    if isinstance(other, _Col) and other.st is not None:
        st = np.where(other.st == _ERR, _ERR, _UNDEF).astype(np.int8)
        return _Col(kind, np.zeros(n, np.int64), st)
    return UNDEFINED


def _strict(op: str, a: Item, b: Item, n: int) -> Item:
    compare_op = op not in ("+", "-", "*", "/")
    if a is ERROR or b is ERROR:
        return ERROR
    if a is UNDEFINED or b is UNDEFINED:
        other = b if a is UNDEFINED else a
        kind = "b" if compare_op else _arith_kind(other)
        return _undefined_with(other, n, kind)
    x = a if isinstance(a, _Col) else _lift(a)
    y = b if isinstance(b, _Col) else _lift(b)
    st = _status(x, y)
    strings = (x.kind == "s", y.kind == "s")
    if compare_op:
        if strings[0] != strings[1]:
            return _all_error(st, n, "b")
        if strings[0]:
            left, right = x.val, y.val
        else:
            real = x.kind == "r" or y.kind == "r"
            left, right = _number(x, real), _number(y, real)
        val = COMPARISONS[op](left, right)
        return _Col("b", np.broadcast_to(val, (n,)), st)
    return _arithmetic(op, x, y, st, n)


def _arithmetic(op: str, x: _Col, y: _Col, st: Array | None, n: int) -> Item:
    strings = (x.kind == "s", y.kind == "s")
    if strings[0] or strings[1]:
        return _all_error(st, n, "i")
    real = x.kind == "r" or y.kind == "r"
    left, right = _number(x, real), _number(y, real)
    error: Array | None = None
    ring = RING_OPERATIONS.get(op)
    with np.errstate(all="ignore"):
        if ring is not None:
            val = ring(left, right)
        elif real:
            val = left / right
        else:
            error = right == 0
            safe = np.where(error, 1, right)
            val = left // safe
            val = val + ((val * safe != left) & ((left < 0) != (safe < 0)))
            val = np.where((left == INT_MIN) & (safe == -1), INT_MAX, val)
        if real:
            error = val == np.inf
    val = np.broadcast_to(val, (n,))
    if error is not None:
        error = np.broadcast_to(error, (n,))
        base = np.zeros(n, np.int8) if st is None else st
        st = np.where((base == _OK) & error, _ERR, base).astype(np.int8)
    return _Col("r" if real else "i", val, st)


def _arith_kind(item: Item) -> str:
    if isinstance(item, _Col):
        return "r" if item.kind == "r" else "i"
    return "r" if type(item) is float else "i"


def _code(item: Item) -> Array | int:
    """Truth codes (false, true, undefined, error) of a column, or one code."""
    if not isinstance(item, _Col):
        found = classad_values.truth(item)
        return _CODE[found] if type(found) is bool else (_U if found is UNDEFINED else _E)
    if item.kind == "s":
        base = np.full(item.val.shape, _E, np.int8)
    elif item.kind == "b":
        base = item.val.astype(np.int8)
    else:
        base = (item.val != 0).astype(np.int8)
    if item.st is not None:
        base = np.where(item.st == _OK, base, item.st + 1).astype(np.int8)
    return base


def _from_code(code: Array) -> _Col:
    return _Col("b", code == _T, np.where(code >= _U, code - 1, _OK).astype(np.int8))


def _st_of(item: Item, n: int) -> Array | int:
    if item is UNDEFINED:
        return _UNDEF
    if item is ERROR:
        return _ERR
    if isinstance(item, _Col) and item.st is not None:
        return item.st
    return _OK


def _identical(a: Item, b: Item, n: int) -> Array:
    sa, sb = _st_of(a, n), _st_of(b, n)
    equal: Array | bool = False
    if not isinstance(a, Special) and not isinstance(b, Special):
        x = a if isinstance(a, _Col) else _lift(a)
        y = b if isinstance(b, _Col) else _lift(b)
        if x.kind == y.kind:
            equal = x.raw == y.raw if x.kind == "s" else x.val == y.val
    both = np.logical_and(np.equal(sa, _OK), np.equal(sb, _OK))
    return np.broadcast_to(np.where(both, equal, np.equal(sa, sb)), (n,))


def _select(code: Array, yes: Item, no: Item, n: int) -> Item:
    kinds = {item.kind if isinstance(item, _Col) else kind_of(item) for item in (yes, no)}
    kinds -= {"u", "e"}
    if len(kinds) > 1:
        raise Unbatchable
    kind = kinds.pop() if kinds else "b"

    def parts(item: Item) -> tuple[Array, Array, Array]:
        if isinstance(item, Special):
            filler = np.bytes_(b"") if kind == "s" else np.zeros((), np.int64)
            return filler, filler, (_UNDEF if item is UNDEFINED else _ERR)
        col = item if isinstance(item, _Col) else _lift(item)
        return col.val, col.raw, (_OK if col.st is None else col.st)

    yv, yr, ys = parts(yes)
    nv, nr, ns = parts(no)
    chosen = code == _T
    val = np.broadcast_to(np.where(chosen, yv, nv), (n,))
    raw = np.broadcast_to(np.where(chosen, yr, nr), (n,)) if kind == "s" else None
    st = np.where(chosen, ys, np.where(code == _F, ns, code - 1)).astype(np.int8)
    return _Col(kind, val, np.broadcast_to(st, (n,)), raw)


def attribute_column(rows: Sequence[Ad], name: str) -> Item:
    """One attribute of each row's ad, as a column (UNDEFINED where a row lacks it);
    ``Unbatchable`` when the rows hold values of different types."""
    found = [row.get(name, UNDEFINED) for row in rows]
    kinds = {kind_of(value) for value in found} - {"u"}
    if not kinds:
        return UNDEFINED
    if len(kinds) > 1:
        raise Unbatchable
    kind = kinds.pop()
    missing = [value is UNDEFINED for value in found]
    fillers: dict[str, Value] = {"b": False, "i": 0, "r": 0.0, "s": ""}
    filler = fillers[kind]
    column = build_column(
        kind, [filler if gone else value for value, gone in zip(found, missing, strict=True)]
    )
    st = np.array(missing, np.int8) if any(missing) else None
    if kind == "s":
        return _Col("s", column[0], st, column[1])
    return _Col(kind, column, st)


def evaluate(
    node: Node, columns: list[Any], target: Ad, n: int, rows: Sequence[Ad] | None = None
) -> Item:
    """One template node over ``n`` rows: a column, or one value for every row.  ``rows``: the
    rows' own attributes, for a pilot's expression (``mirrored``)."""
    kind = node[0]
    if kind == "lit":
        return node[1]  # type: ignore[no-any-return]
    if kind == "attr":
        assert rows is not None
        return attribute_column(rows, node[1])
    if kind == "p":
        param_kind = node[2]
        if param_kind == "u":
            return UNDEFINED
        if param_kind == "e":
            return ERROR
        column = columns[node[1]]
        if param_kind == "s":
            return _Col("s", column[0], None, column[1])
        return _Col(param_kind, column)
    if kind == "target":
        return target.get(node[1], UNDEFINED)
    if kind == "un":
        inner = evaluate(node[2], columns, target, n, rows)
        if not isinstance(inner, _Col):
            one = classad_values.negate if node[1] == "-" else classad_values.logical_not
            return one(inner)
        if node[1] == "!":
            code = _code(inner)
            return _from_code(np.choose(code, np.array([_T, _F, _U, _E], np.int8)))
        if inner.kind in ("i", "r"):
            with np.errstate(all="ignore"):
                return _Col(inner.kind, -inner.val, inner.st)
        return _all_error(inner.st, n, "i")
    if kind in ("and", "or"):
        a = evaluate(node[1], columns, target, n, rows)
        b = evaluate(node[2], columns, target, n, rows)
        if not isinstance(a, _Col) and not isinstance(b, _Col):
            left, right = classad_values.truth(a), classad_values.truth(b)
            return classad_values.logical_junction(left, right, kind == "or")
        table = _AND if kind == "and" else _OR
        code = table[_code(a), _code(b)]
        return _from_code(np.broadcast_to(code, (n,)))
    if kind == "cond":
        test = evaluate(node[1], columns, target, n, rows)
        yes = evaluate(node[2], columns, target, n, rows)
        no = evaluate(node[3], columns, target, n, rows)
        if not isinstance(test, _Col):
            chosen = classad_values.truth(test)
            if chosen is True:
                return yes
            return no if chosen is False else chosen
        return _select(np.asarray(_code(test)), yes, no, n)
    op = node[1]
    a = evaluate(node[2], columns, target, n, rows)
    b = evaluate(node[3], columns, target, n, rows)
    if not isinstance(a, _Col) and not isinstance(b, _Col):
        if op in ("=?=", "=!="):
            same = classad_values.identical(a, b)
            return same if op == "=?=" else not same
        if op in ("+", "-", "*", "/"):
            return classad_values.arithmetic(op, a, b)
        return classad_values.compare(op, a, b)
    if op in ("=?=", "=!="):
        same_rows = _identical(a, b, n)
        return _Col("b", same_rows if op == "=?=" else ~same_rows)
    return _strict(op, a, b, n)


def values(item: Item, n: int) -> list[Value]:
    """The rows' values one by one (tests, debugging)."""
    if not isinstance(item, _Col):
        return [item] * n
    found: list[Value] = []
    for row in range(n):
        status = _OK if item.st is None else int(np.broadcast_to(item.st, (n,))[row])
        if status != _OK:
            found.append(UNDEFINED if status == _UNDEF else ERROR)
            continue
        value = np.broadcast_to(item.val, (n,))[row]
        if item.kind == "s":
            found.append(bytes(np.broadcast_to(item.raw, (n,))[row]).decode())
        elif item.kind == "b":
            found.append(bool(value))
        elif item.kind == "i":
            found.append(int(value))
        else:
            found.append(float(value))
    return found


def truths(item: Item, n: int) -> Array:
    """Which rows a Requirements value lets match."""
    if not isinstance(item, _Col):
        return np.full(n, classad_values.matches(item))
    return np.broadcast_to(_code(item) == _T, (n,))


def ranks(item: Item, n: int) -> Array:
    """The rows' Rank values as the matcher ranks them (``classad_values.rank_value``)."""
    if not isinstance(item, _Col):
        return np.full(n, classad_values.rank_value(item))
    if item.kind == "s":
        return np.zeros(n)
    values = np.broadcast_to(item.val.astype(np.float64), (n,))
    if item.st is not None:
        values = np.where(item.st == _OK, values, 0.0)
    return values


def build_column(kind: str, values: list[Value]) -> Any:
    if kind == "s":
        raw = [str(v).encode() for v in values]
        return (np.array([r.lower() for r in raw], dtype="S"), np.array(raw, dtype="S"))
    if kind in ("u", "e"):
        return None
    return np.array(values, dtype={"b": np.bool_, "i": np.int64, "r": np.float64}[kind])
