"""The matching tests evaluate bare names as the Task Queue's process does."""

from __future__ import annotations

import pytest

from glidein_ext import classads


@pytest.fixture(autouse=True, scope="module")
def _matchmaking() -> None:
    classads.matchmaking_semantics()  # bare names as the Task Queue's process resolves them
