"""Waiting for a condition instead of sleeping a guessed time: poll until it holds, with a
deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    probe: Callable[[], T | None], timeout: float, what: str, interval: float = 0.05
) -> T:
    """Call ``probe`` until it returns something truthy (returned); AssertionError naming
    ``what`` once ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not so after {timeout:.0f} s")
        time.sleep(interval)
