"""The fixed-width tables the demo and the testbed print: each column aligned to its width, its gap
before it, the indent before every line; a counter the Task Queue lacks shown as ``-``."""

from __future__ import annotations

from glidein_ext.demos.table import Column, counter_cell, text_table

COLUMNS: tuple[Column[tuple[str, int, str]], ...] = (
    Column("name", "<6", lambda r: r[0]),
    Column("n", ">3", lambda r: r[1]),
    Column("note", "", lambda r: r[2], gap="  "),
)


def test_each_column_is_aligned_to_its_width_after_its_gap() -> None:
    lines = text_table(COLUMNS, [("a", 1, "x"), ("bb", 22, "")], indent="> ").splitlines()
    assert lines == ["> name     n  note", "> a        1  x", "> bb      22  "]


def test_a_table_without_rows_is_its_head() -> None:
    assert text_table(COLUMNS, []) == "name     n  note"


def test_a_missing_counter_is_a_dash() -> None:
    assert [counter_cell(None), counter_cell(0.125), counter_cell(16.75, 1)] == [
        "-",
        "0.12",
        "16.8",
    ]
