"""The operators' side of the service: per-task views, stuck-work warnings, the masters, and
``/metrics``, mounted on the application by ``server.build_app`` (``install``).

| call | token | answer |
| --- | --- | --- |
| ``GET /api/v1/tasks/{id}`` | operator | one task: attempts, report, pilot, host, times, why |
| ``GET /api/v1/tasks?workflow=&state=&limit=`` | operator | tasks in id order, briefly |
| ``GET /api/v1/warnings`` | operator | the stuck-work warnings holding now (``watch.stuck``) |
| ``GET /api/v1/masters`` | operator | each site's master pilot and epoch |
| ``GET /metrics`` | none | Prometheus text format (``tq.service.watch.metrics``) |

The stuck-work watch (:class:`StuckWatch`) is one of the service's watched loops: every
``stuck_interval`` seconds it reads a snapshot (``insight.stuck_snapshot``), hands it to the pure
detector, logs each new warning once (WARNING on ``glidein_ext.tq.stuck``) and each cleared one
(INFO).  ``/metrics`` needs no token, like ``/healthz`` (Prometheus scrapes it): it shows site and
workflow names and counts, never a task's command, report or a token.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from fastapi import Depends, Path, Query
from fastapi.responses import Response

from glidein_ext.escape import shown
from glidein_ext.tq.client.limits import INT64_MAX
from glidein_ext.tq.client.protocol import API
from glidein_ext.tq.models import TaskState
from glidein_ext.tq.service.api.access import operator_access
from glidein_ext.tq.service.api.fastpath import TaskQueueApp
from glidein_ext.tq.service.loops import WatchedLoop
from glidein_ext.tq.service.matching.costly import CostlyEvaluator
from glidein_ext.tq.service.settings import TqSettings
from glidein_ext.tq.service.store import Store
from glidein_ext.tq.service.watch import insight
from glidein_ext.tq.service.watch.metrics import (
    Metrics,
    RequestMetrics,
    RequestRecord,
    StateCollector,
)
from glidein_ext.tq.service.watch.stuck import StuckDetector, Thresholds, cleared, new_warnings

log = logging.getLogger("glidein_ext.tq.stuck")
TaskId = Annotated[int, Path(ge=1, le=INT64_MAX)]
MAX_LOGGED = 10  # new (or cleared) warnings logged one by one per pass; the rest counted
MAX_LISTED = 1000  # warnings in one answer of GET /api/v1/warnings


class StuckWatch:
    """The periodic pass: snapshot, detect, log what changed."""

    def __init__(
        self, store: Store, settings: TqSettings, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.clock = clock
        # the app's evaluator of costly pairs (``tq.service.matching.costly``), set by ``install``
        self.costly: CostlyEvaluator | None = None
        self.detector = StuckDetector(
            Thresholds(
                queued_after=settings.stuck_queued_after,
                silent_after=settings.stuck_silent_after,
                stalled_after=settings.stuck_stalled_after,
            )
        )
        self.loop = WatchedLoop(
            "stuck-watch",
            self.pass_,
            settings.stuck_interval,
            stuck_after=settings.loop_stuck_after,
            log=log,
            clock=clock,
        )

    def pass_(self) -> None:
        before = list(self.detector.current)
        snapshot = insight.stuck_snapshot(self.store.engine, self.clock(), self.costly)
        after = self.detector.observe(snapshot)
        fresh = new_warnings(before, after)
        for item in fresh[:MAX_LOGGED]:
            log.warning("stuck: %s", shown(item.message))
        if len(fresh) > MAX_LOGGED:
            log.warning("stuck: %d more (GET /api/v1/warnings)", len(fresh) - MAX_LOGGED)
        gone = cleared(before, after)
        for item in gone[:MAX_LOGGED]:
            log.info("no longer stuck: %s", shown(item.subject))
        if len(gone) > MAX_LOGGED:
            log.info("no longer stuck: %d more", len(gone) - MAX_LOGGED)


def install(
    app: TaskQueueApp,
    store: Store,
    settings: TqSettings,
    loops: Sequence[WatchedLoop],
    watch: StuckWatch | None,
) -> Metrics:
    """Add the per-task views, the warnings, the masters, ``/metrics`` and its middleware.  The
    task view and the stuck watch match with the app's evaluator of costly pairs
    (``app.state.costly``), as the pilots' requests do."""
    costly: CostlyEvaluator | None = getattr(app.state, "costly", None)
    if watch is not None:
        watch.costly = costly
    metrics = Metrics()
    metrics.add_state(
        StateCollector(
            lambda: insight.gauges(store.engine),
            lambda: store.counters.snapshot(time.time()),
            lambda: insight.completions_by_site(store.engine),
            loops,
            watch.detector if watch is not None else None,
        )
    )
    record = RequestRecord(metrics.requests, metrics.durations)
    app.add_middleware(RequestMetrics, record=record)
    if app.fast_path is not None:
        app.fast_path.observe(record)
    guarded = [Depends(operator_access)]

    @app.get("/metrics", include_in_schema=False)
    def metrics_text() -> Response:
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)

    @app.get(f"{API}/tasks/{{task_id}}", dependencies=guarded)
    def task(task_id: TaskId) -> dict[str, Any]:
        """One task: state, attempts, last report and exit code, pilot, site and host, times,
        and why a waiting or queued task does not run."""
        return insight.task_detail(
            store.engine,
            task_id,
            time.time(),
            settings.wait_for_data,
            lambda site: store.architecture_of(site).value,
            costly,
        )

    @app.get(f"{API}/tasks", dependencies=guarded)
    def tasks(
        workflow: Annotated[int | None, Query(ge=1, le=INT64_MAX)] = None,
        state: Annotated[TaskState | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=insight.LIST_LIMIT)] = 1000,
    ) -> dict[str, Any]:
        """Tasks in id order (of one workflow, in one state), at most ``limit``."""
        found = insight.list_tasks(
            store.engine, workflow, None if state is None else state.value, limit, time.time()
        )
        return {"tasks": found, "limit": limit}

    @app.get(f"{API}/warnings", dependencies=guarded)
    def warnings() -> dict[str, Any]:
        """The stuck-work warnings of the last pass (queued-idle, silent-pilot, no-progress)."""
        if watch is None:
            return {"warnings": [], "total": 0, "checked_at": None}
        current = watch.detector.current
        return {
            "warnings": [w.to_json() for w in current[:MAX_LISTED]],
            "total": len(current),
            "checked_at": watch.loop.last_ok,
        }

    @app.get(f"{API}/masters", dependencies=guarded)
    def masters() -> dict[str, Any]:
        """Each site with a DHT: its master pilot (null: none), the epoch, the last call."""
        return {"masters": insight.masters(store.engine)}

    return metrics
