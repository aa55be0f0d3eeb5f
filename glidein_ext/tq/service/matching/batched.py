"""Many match groups' Requirements and Rank evaluated at once for one pilot (numpy), as DIRAC's
TaskQueueDB matches a request on indexed columns instead of one ClassAd at a time (Hasham 2011
§IV-E: the matching of one request).

Groups whose compiled expressions (``compiled``) differ only in their constants and in their own
attribute values share a *template*: the expression with each literal and each ``MY`` reference
turned into a parameter, the parameters' types part of the template.  A ``Batch`` holds one
template's groups as columns (one per parameter, plus the resources and the queue order the
matcher ranks by); for a pilot, the ``TARGET`` references are the pilot's values, so each node
of the template is one numpy operation over the whole column (``columns``: the values follow
classad2 exactly, and a template that cannot be evaluated so is ``Unbatchable``).  The pilot's
own Requirements and Rank are evaluated over the same rows (``mirrored``): its MY references are
its values, its TARGET references each group's attribute as a column.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from glidein_ext.tq.service.matching.classad_parse import Node
from glidein_ext.tq.service.matching.classad_values import INT_MAX, INT_MIN, UNDEFINED, Ad, Value
from glidein_ext.tq.service.matching.columns import (
    Array,
    build_column,
    evaluate,
    kind_of,
    ranks,
    truths,
)


def template(tree: Node, my: Ad, params: list[Value]) -> Node | None:
    """``tree`` with its literals and MY references as parameters (appended to ``params``),
    or None when a value does not fit a column (an integer past 64 bits)."""
    kind = tree[0]
    if kind == "bare":  # MY's when MY has it (a parameter), else TARGET's
        kind = "my" if tree[1] in my else "target"
        tree = (kind, tree[1])
    if kind in ("lit", "my"):
        value = tree[1] if kind == "lit" else my.get(tree[1], UNDEFINED)
        if type(value) is int and not INT_MIN <= value <= INT_MAX:
            return None
        params.append(value)
        return ("p", len(params) - 1, kind_of(value))
    if kind == "target":
        return tree
    children: list[Node] = []
    for child in tree[1:]:
        if isinstance(child, tuple):
            found = template(child, my, params)
            if found is None:
                return None
            children.append(found)
        else:
            children.append(child)
    return (kind, *children)


def mirrored(tree: Node, my: Ad) -> Node:
    """A pilot's expression for evaluation over the groups' rows: its MY references are its own
    values (``lit``), its TARGET references the rows' attributes (``attr``)."""
    kind = tree[0]
    if kind == "bare":  # the pilot's own attribute when it has it, else the row's
        kind = "my" if tree[1] in my else "target"
    if kind == "my":
        return ("lit", my.get(tree[1], UNDEFINED))
    if kind == "target":
        return ("attr", tree[1])
    if kind == "lit":
        return tree
    return (kind, *(mirrored(c, my) if isinstance(c, tuple) else c for c in tree[1:]))


class Batch:
    """One template's match groups as columns, with each group's resources and first task."""

    _GROW = 1024

    def __init__(self, ident: int, requirements: Node, rank: Node, kinds: list[str]) -> None:
        self.ident = ident
        self.requirements = requirements
        self.rank = rank
        self.kinds = kinds
        self.epoch = 0  # bumped when rows move (``compact``): evaluations before it are stale
        self.keys: list[str | None] = []
        self.ads: list[Ad] = []  # each row's own attributes (for pilots' TARGET references)
        self.live = 0
        self._params: list[list[Value]] = [[] for _ in kinds]
        self._columns: list[Any] = [None] * len(kinds)
        self._built = 0
        self._capacity = 0
        self.alive = np.zeros(0, np.bool_)
        self.neg_priority = np.zeros(0, np.int64)
        self.first = np.zeros(0, np.int64)
        self.resources = np.zeros((4, 0), np.float64)  # cpus, memory, disk, max runtime

    def __len__(self) -> int:
        return len(self.keys)

    def _grow(self, size: int) -> None:
        def bigger(old: Array) -> Array:
            new = np.zeros((*old.shape[:-1], size), old.dtype)
            new[..., : old.shape[-1]] = old
            return new

        self.alive = bigger(self.alive)
        self.neg_priority = bigger(self.neg_priority)
        self.first = bigger(self.first)
        self.resources = bigger(self.resources)
        self._capacity = size

    def add(
        self,
        key: str,
        params: list[Value],
        resources: tuple[float, float, float, float],
        ad: Ad | None = None,
    ) -> int:
        row = len(self.keys)
        if row >= self._capacity:
            self._grow(max(self._GROW, 2 * self._capacity))
        self.keys.append(key)
        self.ads.append({} if ad is None else ad)
        for column, value in zip(self._params, params, strict=True):
            column.append(value)
        self.alive[row] = True
        self.resources[:, row] = resources
        self.live += 1
        return row

    def set_first(self, row: int, neg_priority: int, first: int) -> None:
        self.neg_priority[row] = neg_priority
        self.first[row] = first

    def kill(self, row: int) -> None:
        self.keys[row] = None
        self.alive[row] = False
        self.live -= 1

    def wants_compaction(self) -> bool:
        dead = len(self.keys) - self.live
        return dead > self._GROW and dead > self.live

    def compact(self) -> dict[str, int]:
        """Drop the dead rows; the groups' new rows."""
        keep = [row for row, key in enumerate(self.keys) if key is not None]
        moved = {self.keys[row]: new for new, row in enumerate(keep)}
        self.keys = [self.keys[row] for row in keep]
        self.ads = [self.ads[row] for row in keep]
        self._params = [[column[row] for row in keep] for column in self._params]
        index = np.array(keep, np.int64)
        size = max(self._GROW, 2 * len(keep))
        for name in ("alive", "neg_priority", "first"):
            old = getattr(self, name)
            new = np.zeros(size, old.dtype)
            new[: len(keep)] = old[index]
            setattr(self, name, new)
        resources = np.zeros((4, size))
        resources[:, : len(keep)] = self.resources[:, index]
        self.resources = resources
        self._capacity = size
        self._columns = [None] * len(self.kinds)
        self._built = 0
        self.epoch += 1
        return {key: row for key, row in moved.items() if key is not None}

    def _columns_for(self, start: int, stop: int) -> list[Any]:
        if self._built < stop:
            extra = [
                build_column(kind, column[self._built : stop])
                for kind, column in zip(self.kinds, self._params, strict=True)
            ]
            if self._built == 0:
                self._columns = extra
            else:
                self._columns = [
                    _concat(old, new) for old, new in zip(self._columns, extra, strict=True)
                ]
            self._built = stop
        return [_slice(column, start, stop) for column in self._columns]

    def evaluate(self, target: Ad, start: int, stop: int) -> tuple[Array, Array]:
        """Rows ``start:stop``: whether the groups' Requirements hold against the pilot
        ``target``, and their Ranks of it.  ``Unbatchable`` if the template cannot be."""
        n = stop - start
        columns = self._columns_for(start, stop)
        matched = truths(evaluate(self.requirements, columns, target, n), n)
        ranked = ranks(evaluate(self.rank, columns, target, n), n)
        return np.array(matched, np.bool_), np.array(ranked, np.float64)

    def evaluate_pilot(
        self, requirements: Node, rank: Node, start: int, stop: int
    ) -> tuple[Array, Array]:
        """Rows ``start:stop``: whether a pilot's Requirements hold against each group, and its
        Rank of each (its expressions ``mirrored``).  ``Unbatchable`` if they cannot be."""
        n = stop - start
        rows = self.ads[start:stop]
        matched = truths(evaluate(requirements, [], {}, n, rows), n)
        ranked = ranks(evaluate(rank, [], {}, n, rows), n)
        return np.array(matched, np.bool_), np.array(ranked, np.float64)

    def candidates(self, matched: Array, limits: tuple[float, float, float, float]) -> Array:
        """Live rows that matched and fit the pilot's resources and remaining life."""
        n = len(self.keys)
        limit = np.array(limits, np.float64).reshape(4, 1)
        fits = np.all(self.resources[:, :n] <= limit, axis=0)
        return np.flatnonzero(self.alive[:n] & matched[:n] & fits)

    def ordered(
        self, rows: Array, task_rank: Array, pilot_rank: Array
    ) -> Iterator[tuple[tuple[float, float, int, int], str, float, float]]:
        """``rows`` best first, as the matcher orders groups: the pilot's Rank, the group's
        Rank, its first task's priority, its first task's id."""
        remaining = rows
        while len(remaining):
            if len(remaining) <= 64:
                items = sorted(self._item(row, task_rank, pilot_rank) for row in remaining)
                yield from items
                return
            ranks_ = pilot_rank[remaining]
            best = remaining[ranks_ == ranks_.max()]
            ranks_ = task_rank[best]
            best = best[ranks_ == ranks_.max()]
            priorities = self.neg_priority[best]
            best = best[priorities == priorities.min()]
            row = int(best[np.argmin(self.first[best])])
            yield self._item(row, task_rank, pilot_rank)
            remaining = remaining[remaining != row]

    def _item(
        self, row: int, task_rank: Array, pilot_rank: Array
    ) -> tuple[tuple[float, float, int, int], str, float, float]:
        rank, theirs = float(task_rank[row]), float(pilot_rank[row])
        order = (-theirs, -rank, int(self.neg_priority[row]), int(self.first[row]))
        key = self.keys[row]
        assert key is not None
        return order, key, theirs, rank


def _concat(old: Any, new: Any) -> Any:
    if old is None:
        return None
    if isinstance(old, tuple):
        return (_concat_strings(old[0], new[0]), _concat_strings(old[1], new[1]))
    return np.concatenate([old, new])


def _concat_strings(old: Array, new: Array) -> Array:
    width = max(old.dtype.itemsize, new.dtype.itemsize, 1)
    return np.concatenate([old.astype(f"S{width}"), new.astype(f"S{width}")])


def _slice(column: Any, start: int, stop: int) -> Any:
    if column is None:
        return None
    if isinstance(column, tuple):
        return (column[0][start:stop], column[1][start:stop])
    return column[start:stop]
