"""`/metrics` of a real `tq serve` stays bounded whatever names pilots and workflows bring: the
series of gone pilots' sites and of finished workflows leave, and where a label could still grow
(live sites, unfinished workflows) at most ``MAX_LABELS`` values have their own series, the rest
one ``(other)`` series."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from glidein_ext.testbed.tq_server import OPERATOR, PILOT, TqServer
from glidein_ext.tq.service.watch.metrics import MAX_LABELS
from tests.support.rawhttp import post_json

SITES = 1000
WORKFLOWS = 150


def _series(server: TqServer) -> list[tuple[str, dict[str, str]]]:
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=30) as answer:  # noqa: S310
        text = answer.read().decode()
    return [
        (sample.name, sample.labels)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def _labels(series: list[tuple[str, dict[str, str]]], label: str) -> set[str]:
    return {labels[label] for _, labels in series if label in labels}


def test_a_thousand_sites_and_many_workflows_leave_metrics_bounded(
    tq_server: Callable[..., TqServer],
) -> None:
    server = tq_server(architecture="distributed")
    before = len(_series(server))
    pilots = []
    for i in range(SITES):
        body = {"site": f"S{i:04d}", "host": "wn", "dht_address": f"127.0.0.1:{2000 + i}"}
        code, text = post_json(server.url, "/api/v1/pilots", body, PILOT)
        assert code == 200, text
        pilot_id = json.loads(text)["pilot_id"]
        pilots.append(pilot_id)
        if i % 10 == 0:  # some sites get a master too (its role, epoch and grants are series)
            claim = {"pilot_id": pilot_id}
            code, text = post_json(server.url, f"/api/v1/sites/S{i:04d}/master", claim, PILOT)
            assert code == 200 and json.loads(text)["granted"], text
    for i in range(WORKFLOWS):
        workflow = {"name": f"w{i}", "tasks": [{"name": "t", "command": "true"}]}
        code, text = post_json(server.url, "/api/v1/workflows", workflow, OPERATOR)
        assert code == 200, text

    live = _series(server)
    sites = _labels(live, "site")
    workflows = _labels(live, "workflow")
    assert len(sites) <= MAX_LABELS + 1 and "(other)" in sites, len(sites)
    assert len(workflows) <= MAX_LABELS + 1 and "(other)" in workflows, len(workflows)
    assert len(live) < before + 20 * MAX_LABELS, len(live)

    client = server.pilot()
    for pilot_id in pilots:
        client.deregister(pilot_id)
    gone = _series(server)
    assert _labels(gone, "site") <= {"(other)"}, sorted(_labels(gone, "site"))[:10]
    assert len(gone) < before + 10 * MAX_LABELS, len(gone)
