"""The task guardian's reading of the pilot's lines (``agent.task_guardian``), driven directly."""

from __future__ import annotations

import os

from glidein_ext.agent.task_guardian import apply, watch


def test_plus_registers_a_group_and_minus_forgets_it() -> None:
    groups: set[int] = set()
    for line in (b"+120", b"+121", b"-120", b"-999"):
        apply(groups, line)
    assert groups == {121}


def test_lines_that_are_not_a_group_are_ignored() -> None:
    groups: set[int] = set()
    for line in (b"", b"+", b"+x1", b"*5", b"+-5", b"+0", b"+1", b"5"):
        apply(groups, line)
    assert groups == set()  # never group 0 (the guardian's own) nor init's


def test_watch_joins_lines_split_across_reads_and_ends_at_end_of_file() -> None:
    reading, writing = os.pipe()
    try:
        for piece in (b"+12", b"34\n+5", b"6\n-5", b"6\n+78\n+9"):  # the last has no newline
            os.write(writing, piece)
        os.close(writing)
        assert watch(reading) == {1234, 78}
    finally:
        os.close(reading)
