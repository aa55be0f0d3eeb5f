"""Costly ClassAd expressions, evaluated away from the event loop within a time budget.

A ClassAd ``regexp`` is PCRE with backtracking: one call of a crafted pattern runs ~0.15 s before
PCRE's match limit stops it, and classad2 holds the GIL all that time, so a thread would not free
the event loop.  An expression calling regexp or its kin (``tq.client.limits.costly_calls``, at most
``MAX_COSTLY_CALLS`` times, checked when it is registered or submitted) makes its pilot or task
group *costly*; the service's matcher (``Matcher.defer_costly``) never evaluates a pair of a pilot
and a group of which either side is costly: it skips such a pair until it has a verdict.  Before a
pilot's request is matched, the API hands the pilot's unsettled costly pairs to ``CostlyEvaluator``
(``settle``; a distributed site's master's ``sync`` and ``assign``: its site's pilots',
``settle_site`` and ``settle_pilots``), which evaluates them one at a time in a worker process,
waiting in its own thread:

- a pair that takes more than ``pair_budget`` seconds does not match (the worker is killed and
  started again), and after ``strikes`` such pairs the pilot's other costly pairs do not match
  either: a pilot's crafted expression costs the service at most that, once;
- pairs left when the request's ``request_budget`` is spent wait for the pilot's next request.

The worker only evaluates ads given as text; it knows nothing else of the Task Queue.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import multiprocessing
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from glidein_ext.errors import TaskQueueError
from glidein_ext.tq.service.matching.match_groups import Verdict
from glidein_ext.tq.service.matching.matcher import Matcher

log = logging.getLogger("glidein_ext.tq.service.matching.costly")
START_TIMEOUT = 60.0  # seconds for the worker to start
Result = tuple[bool, float, float]  # matched, the pilot's Rank of the task, the task's of the pilot


def _serve(conn: Connection) -> None:  # pragma: no cover (runs in the worker process)
    """The worker: (task ad, pilot ad) texts in, one ``Result`` out per pair, until EOF."""
    from glidein_ext import classads

    ads: dict[str, Any] = {}
    conn.send("ready")

    def ad(text: str) -> Any:
        found = ads.get(text)
        if found is None:
            if len(ads) > 1000:
                ads.clear()
            found = ads[text] = classads.parse_ad(text)
        return found

    while True:
        try:
            task_text, pilot_text = conn.recv()
        except (EOFError, OSError):
            return
        try:
            task, pilot = ad(task_text), ad(pilot_text)
            if classads.symmetric_match(task, pilot):
                result: Result = (True, classads.rank(pilot, task), classads.rank(task, pilot))
            else:
                result = (False, 0.0, 0.0)
        except Exception:  # noqa: BLE001 (an ad the worker cannot evaluate does not match)
            result = (False, 0.0, 0.0)
        conn.send(result)


@dataclass(eq=False)
class CostlyEvaluator:
    """The costly pairs of ``matcher`` (whose ``defer_costly`` it turns on): one worker process
    (started when first needed, again after a kill) and the thread that talks to it; ``close``
    ends both."""

    matcher: Matcher
    pair_budget: float = 0.5
    request_budget: float = 2.0
    strikes: int = 2
    evaluated: int = field(default=0, init=False)
    too_costly: int = field(default=0, init=False)  # pairs that ran past pair_budget
    # pilot -> pairs of it that ran past pair_budget (an int per pilot that ever did)
    _struck: dict[int, int] = field(default_factory=dict, init=False)
    _process: Any = field(default=None, init=False)
    _conn: Connection | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        self.matcher.defer_costly = True
        self._context = multiprocessing.get_context("spawn")
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tq-costly")

    async def settle(self, pilot_id: int, now: float) -> int:
        """Give the pilot's unsettled costly pairs their verdicts (within the budgets), in the
        evaluator's own thread; how many were settled."""
        if not self.matcher.pending_costly(pilot_id, now, limit=1):
            return 0
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self.settle_now, pilot_id, now)

    async def settle_pilots(self, pilot_ids: Iterable[int], now: float) -> int:
        """``settle`` for several pilots (those a distributed site's master assigns), within one
        ``request_budget`` for all of them, in the evaluator's thread; how many pairs were
        settled."""
        ids = list(pilot_ids)
        if not ids:
            return 0
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._settle_several, ids, now)

    async def settle_site(self, site: str, now: float) -> int:
        """``settle_pilots`` for the matcher's pilots of ``site`` (a distributed site whose
        master asks for its offers), chosen in the evaluator's thread too."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._settle_site, site, now)

    def _settle_site(self, site: str, now: float) -> int:
        matcher = self.matcher
        ids = [p for p in matcher.pilot_ids() if (i := matcher.pilot(p)) and i.site == site]
        return self._settle_several(ids, now)

    def _settle_several(self, pilot_ids: list[int], now: float) -> int:
        waiting = [p for p in pilot_ids if self.matcher.pending_costly(p, now, limit=1)]
        deadline = time.monotonic() + self.request_budget
        settled = 0
        for pilot_id in waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            settled += self.settle_now(pilot_id, now, budget=left)
        return settled

    def settle_now(
        self,
        pilot_id: int,
        now: float,
        matcher: Matcher | None = None,
        budget: float | None = None,
    ) -> int:
        """``settle`` in the calling thread (a thread, never the event loop's): for ``matcher``
        (the service's by default; the operators' views build their own, ``tq.service.watch``),
        within ``budget`` seconds (``request_budget`` by default).  A pilot's strikes count
        whichever matcher found them."""
        matcher = self.matcher if matcher is None else matcher
        pending = matcher.pending_costly(pilot_id, now)
        if self._struck.get(pilot_id, 0) >= self.strikes:
            for key, _task, _pilot in pending:
                matcher.settle(pilot_id, key, Verdict(False))
            return len(pending)
        deadline = time.monotonic() + (self.request_budget if budget is None else budget)
        settled = 0
        for key, task_text, pilot_text in pending:
            if time.monotonic() >= deadline:
                break
            result = self.evaluate(task_text, pilot_text)
            if result is None:
                self.too_costly += 1
                strikes = self._struck[pilot_id] = self._struck.get(pilot_id, 0) + 1
                more = "; nor do its other costly pairs" if strikes >= self.strikes else ""
                log.warning(
                    "pilot %d: matching it with a task group took over %.1f s (regexp?): "
                    "no match%s",
                    pilot_id,
                    self.pair_budget,
                    more,
                )
                matcher.settle(pilot_id, key, Verdict(False))
                if strikes >= self.strikes:
                    for rest, _task, _pilot in pending[settled + 1 :]:
                        matcher.settle(pilot_id, rest, Verdict(False))
                    return len(pending)
            else:
                matcher.settle(pilot_id, key, Verdict(*result))
            settled += 1
        return settled

    def evaluate(self, task_text: str, pilot_text: str) -> Result | None:
        """One pair in the worker; None if it took more than ``pair_budget`` (worker killed)."""
        with self._lock:
            conn = self._worker()
            conn.send((task_text, pilot_text))
            if conn.poll(self.pair_budget):
                try:
                    result: Result = conn.recv()
                except (EOFError, OSError):
                    self._stop()
                    return None
                self.evaluated += 1
                return result
            self._stop()
            return None

    def close(self) -> None:
        with self._lock:
            self._stop()
        self._thread.shutdown(wait=False, cancel_futures=True)

    def _worker(self) -> Connection:
        if self._conn is None or self._process is None or not self._process.is_alive():
            self._stop()
            mine, theirs = self._context.Pipe()
            process = self._context.Process(
                target=_serve, args=(theirs,), name="tq-costly-worker", daemon=True
            )
            process.start()
            theirs.close()
            self._process, self._conn = process, mine
            # its start (Python, classad2) is not a pair's cost
            if not mine.poll(START_TIMEOUT) or mine.recv() != "ready":
                self._stop()
                raise TaskQueueError("the costly expressions' worker process did not start")
        return self._conn

    def _stop(self) -> None:
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if conn is not None:
            conn.close()
        if process is not None:
            process.kill()
            process.join(5)
