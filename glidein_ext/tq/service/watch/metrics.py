"""``/metrics``: the Task Queue in the Prometheus text format (``prometheus_client``), and the
request log.

Per call, one ASGI middleware (:class:`RequestMetrics`, or the pilots' fast path for the calls it
serves: :class:`RequestRecord`) classifies the request by kind without a
regular expression, takes two clock readings, increments one counter and observes one histogram
(children cached per label set), and writes a DEBUG line on ``glidein_ext.tq.requests`` only when
that logger is enabled (``tq serve --log-level debug``).  Everything else is read at scrape time
by :class:`StateCollector`: tasks by workflow and state, pilots by site and state, each site's
master and epoch, the run's counters (rounds, inputs by origin: what the pilots report), the
background loops' health and the stuck-work warnings.  Each application has its own registry, so
several in one process (tests) never clash.

Bounded whatever names pilots and submitters bring: a site has series of its own while it has a
live pilot (inactive, idle or busy), a workflow while it has unfinished tasks; at most
``MAX_LABELS`` of each (the most pilots, the most unfinished tasks), the rest summed in one
``(other)`` series, and finished workflows' tasks in one ``(finished)`` series (neither can be a
site's name, an identifier, nor a workflow's ``id:name``).  So the series of gone pilots' sites
and finished workflows leave, and the counters of a site that left continue in ``(other)``.

The names (all ``glidein_ext_tq_*``) are listed in ``NAMES``; the Grafana dashboard shipped in
``glidein_ext/tq/service/grafana/`` uses only these (a test holds them together).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from glidein_ext import __version__
from glidein_ext.escape import shown
from glidein_ext.tq.service.counters import call_kind
from glidein_ext.tq.service.loops import WatchedLoop
from glidein_ext.tq.service.watch.stuck import StuckDetector

PREFIX = "glidein_ext_tq"
MAX_LABELS = 100  # sites, and workflows, with series of their own; the rest in OTHER
OTHER = "(other)"
FINISHED = "(finished)"
_LIVE = frozenset({"inactive", "idle", "busy"})  # a pilot's states while it is a pilot
_UNFINISHED = frozenset({"waiting", "queued", "running"})
request_log = logging.getLogger("glidein_ext.tq.requests")
# Seconds: the pilot calls take about a millisecond; a submit of a large workflow, seconds.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# Every metric family /metrics exports (without the _total/_bucket/... suffixes).
NAMES = (
    f"{PREFIX}_requests",
    f"{PREFIX}_request_duration_seconds",
    f"{PREFIX}_tasks",
    f"{PREFIX}_pilots",
    f"{PREFIX}_site_master",
    f"{PREFIX}_site_master_epoch",
    f"{PREFIX}_site_master_last_seen_timestamp_seconds",
    f"{PREFIX}_masters_granted",
    f"{PREFIX}_rounds",
    f"{PREFIX}_round_rank_sum",
    f"{PREFIX}_round_pilots_served",
    f"{PREFIX}_round_phase_seconds",
    f"{PREFIX}_task_inputs",
    f"{PREFIX}_completions",
    f"{PREFIX}_loop_passes",
    f"{PREFIX}_loop_errors",
    f"{PREFIX}_loop_stuck",
    f"{PREFIX}_loop_last_ok_timestamp_seconds",
    f"{PREFIX}_warnings",
    f"{PREFIX}_info",
)


class RequestRecord:
    """Every HTTP request counted by kind and status, its duration observed, and (logger
    enabled) one DEBUG line: ``METHOD PATH STATUS MS``; called by :class:`RequestMetrics` and by
    the pilots' fast path (``tq.service.api.fastpath``) for the calls it serves."""

    def __init__(self, requests: Counter, durations: Histogram) -> None:
        self.requests = requests
        self.durations = durations
        self._counted: dict[tuple[str, int], Any] = {}
        self._timed: dict[str, Any] = {}

    def __call__(self, method: str, path: str, status: int, seconds: float) -> None:
        kind = call_kind(method, path)
        counted = self._counted.get((kind, status))
        if counted is None:
            counted = self._counted[(kind, status)] = self.requests.labels(kind, str(status))
        counted.inc()
        timed = self._timed.get(kind)
        if timed is None:
            timed = self._timed[kind] = self.durations.labels(kind)
        timed.observe(seconds)
        if request_log.isEnabledFor(logging.DEBUG):
            request_log.debug(
                "%s %s %d %.1f ms", shown(method), shown(path), status, seconds * 1000
            )


class RequestMetrics:
    """ASGI middleware: each HTTP request's status and duration, told to ``record``."""

    def __init__(self, app: ASGIApp, record: RequestRecord) -> None:
        self.app = app
        self.record = record

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500  # unless an answer starts

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.record(scope["method"], scope["path"], status, time.perf_counter() - start)


@dataclass(eq=False)
class StateCollector(Collector):
    """The Task Queue's state, read at each scrape."""

    gauges: Callable[[], Any]
    counters: Callable[[], dict[str, Any]]
    completions: Callable[[], dict[tuple[str, str], int]]
    loops: Sequence[WatchedLoop]
    detector: StuckDetector | None

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(f"{PREFIX}_info", "The Task Queue's version.", labels=["version"])
        info.add_metric([__version__], 1)
        yield info
        found = self.gauges()
        unfinished = _weights(found.tasks, _UNFINISHED)
        running = _kept(unfinished)
        tasks = GaugeMetricFamily(
            f"{PREFIX}_tasks",
            f"Tasks by workflow (id:name; {FINISHED}: finished workflows, {OTHER}: unfinished "
            f"ones beyond the {MAX_LABELS} with most unfinished tasks) and state.",
            labels=["workflow", "state"],
        )
        yield _with_series(tasks, _folded(found.tasks, running, FINISHED, unfinished))
        sites = _kept(_weights(found.pilots, _LIVE))
        pilots = GaugeMetricFamily(
            f"{PREFIX}_pilots",
            "Pilots by site and state (inactive: submitted, not registered yet; "
            f"{OTHER}: sites without a live pilot or beyond the {MAX_LABELS} with most).",
            labels=["site", "state"],
        )
        yield _with_series(pilots, _folded(found.pilots, sites))
        yield from self._masters([m for m in found.masters if m["site"] in sites])
        yield from self._run(sites)
        done = CounterMetricFamily(
            f"{PREFIX}_completions",
            "Accepted task completions by the reporting pilot's site and result (ok, failed; "
            f"{OTHER}: sites without a live pilot or beyond the {MAX_LABELS} with most).",
            labels=["site", "result"],
        )
        yield _with_series(done, _folded(self.completions(), sites))
        yield from self._loops()
        warnings = GaugeMetricFamily(
            f"{PREFIX}_warnings", "Stuck-work warnings holding now, by kind.", labels=["kind"]
        )
        by_kind: dict[str, int] = {"queued-idle": 0, "silent-pilot": 0, "no-progress": 0}
        for item in self.detector.current if self.detector is not None else ():
            by_kind[item.kind] = by_kind.get(item.kind, 0) + 1
        for kind, n in sorted(by_kind.items()):
            warnings.add_metric([kind], n)
        yield warnings

    def _masters(self, masters: list[dict[str, Any]]) -> Iterator[Metric]:
        yield from _per_item(
            "site",
            [(item["site"], item) for item in masters],
            (
                (
                    GaugeMetricFamily,
                    "site_master",
                    "A distributed site's master pilot id (0: none).",
                    lambda item: item["master_id"] or 0,
                ),
                (
                    GaugeMetricFamily,
                    "site_master_epoch",
                    "The epoch of a site's master role.",
                    lambda item: item["epoch"],
                ),
                (
                    GaugeMetricFamily,
                    "site_master_last_seen_timestamp_seconds",
                    "When a site's master last called the Task Queue.",
                    lambda item: item["master_seen"],
                ),
            ),
        )

    def _run(self, sites: frozenset[str]) -> Iterator[Metric]:
        snapshot = self.counters()
        overall = snapshot["overall"]
        granted = CounterMetricFamily(
            f"{PREFIX}_masters_granted",
            "Master roles granted since the Task Queue started, by site.",
            labels=["site"],
        )
        grants = {(site, ""): len(items) for site, items in snapshot["masters"].items()}
        for (site, _), n in _folded(grants, sites):
            granted.add_metric([site], n)
        yield granted
        rounds = overall["rounds"]
        yield CounterMetricFamily(
            f"{PREFIX}_rounds", "Distributed masters' assignment rounds.", value=rounds["n"]
        )
        yield CounterMetricFamily(
            f"{PREFIX}_round_rank_sum",
            "Sum of the ranks masters assigned (Delgado Peris 2014 §III.C).",
            value=rounds["rank_sum"],
        )
        yield CounterMetricFamily(
            f"{PREFIX}_round_pilots_served",
            "Pilots served by masters' rounds.",
            value=rounds["served"],
        )
        phases = CounterMetricFamily(
            f"{PREFIX}_round_phase_seconds",
            "Seconds distributed masters' rounds spent in each phase, by site.",
            labels=["site", "phase"],
        )
        spent = {
            (site, phase): seconds
            for site, totals in snapshot.get("phases", {}).items()
            for phase, seconds in totals.items()
        }
        for (site, phase), seconds in _folded(spent, sites):
            phases.add_metric([site, phase], seconds)
        yield phases
        inputs = CounterMetricFamily(
            f"{PREFIX}_task_inputs",
            "Task inputs the pilots read, by origin (cache, host, peer, se).",
            labels=["origin"],
        )
        for origin, n in sorted(overall["inputs"].items()):
            inputs.add_metric([origin], n)
        yield inputs

    def _loops(self) -> Iterator[Metric]:
        now = time.time()
        yield from _per_item(
            "loop",
            [(loop.name, loop) for loop in self.loops],
            (
                (
                    CounterMetricFamily,
                    "loop_passes",
                    "Background loops' successful passes.",
                    lambda loop: loop.passes,
                ),
                (
                    CounterMetricFamily,
                    "loop_errors",
                    "Background loops' failed passes.",
                    lambda loop: loop.errors,
                ),
                (
                    GaugeMetricFamily,
                    "loop_stuck",
                    "1 when a background loop is stuck.",
                    lambda loop: 1 if loop.stuck(now) else 0,
                ),
                (
                    GaugeMetricFamily,
                    "loop_last_ok_timestamp_seconds",
                    "A background loop's last successful pass.",
                    lambda loop: loop.last_ok,
                ),
            ),
        )


# One family of a table: its type, its name after PREFIX, its help, and an item's value (None:
# the item has no series in it).
FamilySpec = tuple[
    Callable[..., GaugeMetricFamily | CounterMetricFamily], str, str, Callable[[Any], Any]
]


def _per_item(
    label: str, items: Sequence[tuple[str, Any]], specs: Sequence[FamilySpec]
) -> Iterator[Metric]:
    """One family per spec, with a series labelled ``label`` for each (label value, item) of
    ``items`` whose value is not None."""
    for kind, name, help_text, value_of in specs:
        family = kind(f"{PREFIX}_{name}", help_text, labels=[label])
        for labelled, item in items:
            value = value_of(item)
            if value is not None:
                family.add_metric([labelled], value)
        yield family


def _weights(values: dict[tuple[str, str], int], states: frozenset[str]) -> dict[str, int]:
    """The sum of ``values`` by (label, state) over ``states``, by label."""
    weights: dict[str, int] = {}
    for (label, state), n in values.items():
        if state in states:
            weights[label] = weights.get(label, 0) + n
    return weights


def _with_series(
    family: GaugeMetricFamily | CounterMetricFamily, rows: list[tuple[tuple[str, str], Any]]
) -> Metric:
    """``family`` with a series for each ((label, second label), value) of ``rows``."""
    for labels, value in rows:
        family.add_metric(list(labels), value)
    return family


def _kept(weights: dict[str, int]) -> frozenset[str]:
    """The labels with series of their own: the ``MAX_LABELS`` heaviest (then by name)."""
    ranked = sorted(weights.items(), key=lambda item: (-item[1], item[0]))
    return frozenset(label for label, weight in ranked[:MAX_LABELS] if weight > 0)


def _folded(
    values: dict[tuple[str, str], Any],
    kept: frozenset[str],
    gone: str = OTHER,
    growing: dict[str, int] | None = None,
) -> list[tuple[tuple[str, str], Any]]:
    """``values`` by (label, second label), sorted, with the labels not ``kept`` summed in
    ``OTHER``, or in ``gone`` when they are not in ``growing`` (a finished workflow)."""
    out: dict[tuple[str, str], Any] = {}
    for (label, second), n in values.items():
        shown_as = label
        if label not in kept:
            shown_as = OTHER if growing is None or label in growing else gone
        out[(shown_as, second)] = out.get((shown_as, second), 0) + n
    return sorted(out.items())


class Metrics:
    """One application's registry: the request instruments and the state collector."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter(
            f"{PREFIX}_requests",
            "HTTP requests by kind and status code.",
            ["kind", "status"],
            registry=self.registry,
        )
        self.durations = Histogram(
            f"{PREFIX}_request_duration_seconds",
            "HTTP request latency by kind (seconds, in the service).",
            ["kind"],
            buckets=BUCKETS,
            registry=self.registry,
        )

    def add_state(self, collector: StateCollector) -> None:
        self.registry.register(collector)

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
