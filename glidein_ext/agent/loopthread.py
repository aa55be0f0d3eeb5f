"""One asyncio event loop in a thread, shared by the pilots of a process.

The agent is thread-based (a pilot's tasks are subprocesses started from its own thread), while
the site DHT, the worker's answers and the master's rounds are asyncio.  Each process runs one
loop thread: every pilot's DHT node lives on it, and the pilots' threads hand it coroutines with
:meth:`LoopThread.run` (wait for the result) or :meth:`LoopThread.spawn` (a task the loop thread
owns until it ends or :meth:`LoopThread.stop` cancels it).

Python 3.9, standard library only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger("glidein_ext.agent")


class LoopThread:
    """An event loop running in a thread of its own; ``start()`` then ``stop()``."""

    def __init__(self, name: str = "pilot-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._started = threading.Event()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        self.loop.run_forever()

    def start(self) -> LoopThread:
        self._thread.start()
        self._started.wait()
        self.spawn(self._watch(), "loop-watch")
        return self

    async def _watch(self, every: float = 0.5, late: float = 1.0) -> None:
        """Log when the loop was held up: every pilot of the process answers late meanwhile."""
        while True:
            start = self.loop.time()
            await asyncio.sleep(every)
            lag = self.loop.time() - start - every
            if lag > late:
                log.warning("the pilots' event loop was held up for %.1f s", lag)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (from another thread)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def spawn(self, coro: Coroutine[Any, Any, None], name: str = "") -> None:
        """Start ``coro`` as a task the loop thread owns (any thread may call this)."""
        self.loop.call_soon_threadsafe(self._spawn, coro, name)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = self.loop.create_task(coro, name=name or None)
        self._tasks.add(task)
        task.add_done_callback(self._reap)

    def _reap(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("pilot task %s failed", task.get_name(), exc_info=task.exception())

    async def _cancel_all(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.loop.shutdown_default_executor()  # the threads of run_in_executor

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel the tasks it owns, end its executor's threads, stop the loop, join the
        thread."""
        if not self._thread.is_alive():
            return
        try:
            self.run(self._cancel_all(), timeout)
        except concurrent.futures.TimeoutError:
            log.warning("pilot tasks did not end within %g s", timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.loop.close()
