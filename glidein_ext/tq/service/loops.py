"""The service's background loops (the reaper, the PilotMonitor), each watched.

A loop runs a pass in a worker thread every ``interval`` seconds.  A failing pass (``database is
locked`` beyond the busy timeout, a schedd down) is logged and counted and the loop goes on: it
never ends but by cancellation.  Each loop keeps its last successful pass and its last error for
``/healthz``; a loop without a successful pass for ``interval + stuck_after`` seconds (failing
every time, or a pass hanging) is stuck, and the service reports itself unhealthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

ERROR_CHARS = 300  # of an error kept for /healthz


@dataclass(eq=False)
class WatchedLoop:
    """``pass_()`` every ``interval`` seconds until cancelled; failures logged, never raised."""

    name: str
    pass_: Callable[[], object]
    interval: float
    _: KW_ONLY
    stuck_after: float
    log: logging.Logger
    clock: Callable[[], float] = time.time
    started_at: float = field(init=False)
    passes: int = field(default=0, init=False)
    errors: int = field(default=0, init=False)
    last_ok: float | None = field(default=None, init=False)
    last_error: str | None = field(default=None, init=False)
    last_error_at: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.started_at = self.clock()

    async def run(self) -> None:
        """Pass, sleep, pass...; a pass in flight when cancelled is let finish first."""
        self.started_at = self.clock()
        while True:
            pending = asyncio.ensure_future(asyncio.to_thread(self.pass_))
            try:
                await asyncio.shield(pending)
            except asyncio.CancelledError:
                # shutting down: let a pass in flight finish before the store is closed
                with contextlib.suppress(Exception):
                    await pending
                raise
            except Exception as exc:  # noqa: BLE001 -- a background loop survives a failing pass: logged, counted, shown in /healthz
                self.failed(exc)
            else:
                self.passes += 1
                self.last_ok = self.clock()
            await asyncio.sleep(self.interval)

    def failed(self, exc: BaseException) -> None:
        self.errors += 1
        self.last_error = f"{type(exc).__name__}: {exc}"[:ERROR_CHARS]
        self.last_error_at = self.clock()
        self.log.error(
            "%s pass failed (retry in %g s): %s",
            self.name,
            self.interval,
            self.last_error,
            exc_info=exc,
        )

    def stuck(self, now: float) -> bool:
        """No successful pass for ``interval + stuck_after`` seconds (since the start, at first)."""
        since = self.last_ok if self.last_ok is not None else self.started_at
        return now - since > self.interval + self.stuck_after

    def health(self, now: float) -> dict[str, Any]:
        return {
            "interval": self.interval,
            "passes": self.passes,
            "errors": self.errors,
            "last_ok": self.last_ok,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at,
            "stuck": self.stuck(now),
        }
