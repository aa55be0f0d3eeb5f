"""Fixed-width text tables of the Task Queue's counters: the main demo's results and the
testbed's comparisons.  A table is its columns (a head, an alignment and width, a cell taken from
each row) and its rows; a line of heads, then one line per row."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

R = TypeVar("R")


@dataclass(frozen=True)
class Column(Generic[R]):
    """One column: ``head`` and every cell formatted with ``spec`` (``"<12"``: left-aligned in
    12 characters, ``">9"``: right-aligned, ``""``: as it is), ``gap`` before it."""

    head: str
    spec: str
    cell: Callable[[R], object]
    gap: str = " "


def text_table(columns: Sequence[Column[R]], rows: Iterable[R], indent: str = "") -> str:
    """The head line and one line per row, each prefixed with ``indent``."""

    def line(cells: Sequence[object]) -> str:
        text = "".join(f"{c.gap}{cell:{c.spec}}" for c, cell in zip(columns, cells, strict=True))
        return indent + text[len(columns[0].gap) :]

    lines = [line([c.head for c in columns])]
    lines += [line([c.cell(row) for c in columns]) for row in rows]
    return "\n".join(lines)


def counter_cell(value: float | None, digits: int = 2) -> str:
    """A counter in a table: ``-`` where the Task Queue has none."""
    return "-" if value is None else f"{value:.{digits}f}"
