"""The pilot agent loop (seed 001 IV): register, pull a task, run it, report, heartbeat, leave.

One thread (the caller's) pulls and runs tasks; one heartbeat thread, owned by the agent and joined
before it returns, keeps the pilot alive and learns the other pilots on its host (seed IV-D).
Calls to the TQ are retried for ``retry_for`` seconds, so a TQ restart costs no task: the complete
report is idempotent and a repeated request returns the task the pilot already holds.
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from glidein_ext.agent.pilot_cache import PilotCache
from glidein_ext.agent.runner import run_task
from glidein_ext.agent.settings import AgentSettings
from glidein_ext.errors import (
    TaskQueueAuthError,
    TaskQueueError,
    TaskQueueNotFound,
    TaskQueueRequestError,
)
from glidein_ext.tq.client import TqClient
from glidein_ext.tq.protocol import Completion, Neighbour, Registration

T = TypeVar("T")
_DEFAULTS = AgentSettings()
log = logging.getLogger("glidein_ext.agent")


@dataclass(frozen=True)
class AgentConfig:
    url: str
    token: str
    site: str
    workdir: Path
    host: str = field(default_factory=socket.gethostname)
    se: str = ""
    se_dir: Path | None = None
    cpus: int = _DEFAULTS.cpus
    memory: int = _DEFAULTS.memory
    disk: int = _DEFAULTS.disk
    ttl: int | None = None
    requirements: str = "true"
    rank: str = "0"
    attributes: dict[str, Any] = field(default_factory=dict)
    centralized: bool = False  # send the cache list with each request (seed IV-E)
    poll_interval: float = _DEFAULTS.poll_interval
    max_idle: float | None = None  # leave after this long without a task
    max_tasks: int | None = None
    retry_for: float = _DEFAULTS.retry_for
    batch_id: str | None = None
    cache_max_space: int = _DEFAULTS.max_space_bytes  # bytes (seed IV.C: Max_Space)
    cache_min_threshold: int = _DEFAULTS.min_threshold_bytes  # bytes (seed IV.C: Min_Threshold)


class PilotAgent:
    """One pilot: ``run()`` returns the number of tasks it ran."""

    def __init__(self, config: AgentConfig, stop: threading.Event | None = None) -> None:
        self.config = config
        self.client = TqClient(config.url, config.token)
        self.stop = stop or threading.Event()
        self.cache_dir = config.workdir / "cache"
        self.cache: PilotCache | None = None  # opened by register()
        self.pilot_id: int | None = None
        self.lost = threading.Event()
        self._report_lock = threading.Lock()

    def _retry(self, what: str, call: Callable[[], T]) -> T:
        deadline = time.monotonic() + self.config.retry_for
        delay = 0.2
        while True:
            try:
                return call()
            except (TaskQueueNotFound, TaskQueueAuthError, TaskQueueRequestError):
                raise
            except TaskQueueError as exc:
                if time.monotonic() > deadline or (self.stop.is_set() and what != "complete"):
                    raise
                log.warning("%s failed (%s); retrying", what, exc)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def open_cache(self) -> PilotCache:
        if self.cache is None:
            c = self.config
            self.cache = PilotCache(
                self.cache_dir,
                max_space=c.cache_max_space,
                min_threshold=c.cache_min_threshold,
                se_dir=c.se_dir,
            )
        return self.cache

    def _set_neighbours(self, others: Sequence[Neighbour]) -> None:
        cache = self.open_cache()
        with self._report_lock:  # HostShare is driven by one thread at a time
            cache.set_others(others)
            cache.poll_host()

    def heartbeat(self, pilot_id: int) -> None:
        """One heartbeat; carries the cache list when it changed (evictions, last links)."""
        cache = self.open_cache()
        with self._report_lock:
            cached = cache.changes()
            answer = self.client.heartbeat(pilot_id, cached)
            if cached is not None:
                cache.mark_reported(cached)
                log.info("reported %d cached file(s) to the Task Queue", len(cached))
        self._set_neighbours(answer.others)

    def report_cache(self, pilot_id: int, failed: str = "cache report failed") -> None:
        """A heartbeat now (after a task: tells the cache changes at once).  A pilot the Task
        Queue forgot stops the agent; any other failure is logged and the next beat retries."""
        try:
            self.heartbeat(pilot_id)
        except TaskQueueNotFound:
            log.warning("the Task Queue forgot pilot %s; stopping", pilot_id)
            self.lost.set()
            self.stop.set()
        except TaskQueueError as exc:
            log.warning("%s (the next heartbeat retries): %s", failed, exc)

    def register(self) -> int:
        c = self.config
        cache = self.open_cache()
        cached = cache.lfns()
        registration = Registration(
            site=c.site,
            host=c.host,
            se=c.se,
            cpus=c.cpus,
            memory=c.memory,
            disk=c.disk,
            ttl=c.ttl,
            attributes=c.attributes,
            requirements=c.requirements,
            rank=c.rank,
            cache_dir=str(self.cache_dir.resolve()),
            cached=tuple(cached),
            batch_id=c.batch_id,
        )
        answer = self._retry("register", functools.partial(self.client.register, registration))
        self.pilot_id = answer.pilot_id
        self.heartbeat_interval = float(answer.heartbeat_interval)
        cache.mark_reported(cached)
        cache.set_pilot_id(self.pilot_id)
        self._set_neighbours(answer.others)
        log.info("registered as pilot %s at %s", self.pilot_id, c.url)
        return self.pilot_id

    def _heartbeats(self, pilot_id: int) -> None:
        while not self.stop.wait(self.heartbeat_interval):  # a forgotten pilot sets stop
            self.report_cache(pilot_id, "heartbeat failed")

    def run(self) -> int:
        pilot_id = self.register()
        beat = threading.Thread(target=self._heartbeats, args=(pilot_id,), name="tq-heartbeat")
        beat.start()
        ran = 0
        try:
            ran = self._loop(pilot_id)
        finally:
            self.stop.set()
            beat.join()
            if not self.lost.is_set():
                try:
                    self.client.deregister(pilot_id)
                except TaskQueueError as exc:
                    log.warning("deregister failed: %s", exc)
        return ran

    def _loop(self, pilot_id: int) -> int:
        ran = 0
        idle_since = time.monotonic()
        c = self.config
        while not self.stop.is_set():
            if c.max_tasks is not None and ran >= c.max_tasks:
                break
            cache = self.open_cache()
            cached = cache.lfns() if c.centralized else None
            task = self._retry("request", functools.partial(self.client.request, pilot_id, cached))
            if cached is not None:
                cache.mark_reported(cached)
            if task is None:
                if c.max_idle is not None and time.monotonic() - idle_since > c.max_idle:
                    break
                self.stop.wait(c.poll_interval)
                continue
            log.info("running task %s (%s)", task.task_id, task.name)
            outcome = run_task(task, c.workdir, cache, self.stop)
            if self.lost.is_set():
                break
            if self.stop.is_set():
                break  # interrupted: the deregister below requeues the task
            completion = Completion(
                task.task_id,
                task.attempt,
                outcome.exit_code,
                tuple(outcome.outputs),
                outcome.report,
            )
            self._retry("complete", functools.partial(self.client.complete, pilot_id, completion))
            cache.forget_reported()  # the TQ added the outputs (pre-DHT): send the whole list
            self.report_cache(pilot_id)
            if self.lost.is_set():
                break
            ran += 1
            idle_since = time.monotonic()
        return ran
