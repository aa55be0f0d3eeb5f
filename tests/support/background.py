"""A test's helper thread that loops while a ``with`` block runs."""

from __future__ import annotations

import threading
from typing import TypeVar

_Loop = TypeVar("_Loop", bound="BackgroundLoop")


class BackgroundLoop:
    """Runs ``step()`` over and over in a thread of its own while a ``with`` block runs; leaving
    the block sets ``done``, so the loop ends after the step under way, and joins the thread.
    A subclass defines ``step`` (and extends ``__exit__`` to free what its steps left)."""

    def __init__(self, name: str) -> None:
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=name)

    def step(self) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        while not self.done.is_set():
            self.step()

    def __enter__(self: _Loop) -> _Loop:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()
