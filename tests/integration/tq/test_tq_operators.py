"""What operators see, against a real `tq serve` and real pilots, through the commands they type:
why a task failed (`tq status --tasks`, `tq task`, the pilot's log, the task's log), why a queued
task waits, the stuck-work warnings, the request log, `/metrics` in the Prometheus text format
(and the Grafana dashboard's metric names), `--watch` without a value, one `tq serve` per SQLite
file, and the one-line errors of a mistyped URL or TLS setup."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from glidein_ext.testbed.tls import make_pki, openssl_available, self_signed
from glidein_ext.testbed.tq_server import OPERATOR, PILOT, TqServer
from tests.support.cli import operator_env, run_cli

DASHBOARD = Path(__file__).resolve().parents[3] / "glidein_ext/tq/service/grafana/task-queue.json"


def cli(*args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    """``glidein-ext ARGS`` as a process (the operator's token set); never a traceback."""
    return run_cli(*args, env=operator_env(**env), timeout=timeout)


def test_a_failed_tasks_reason_is_shown_by_status_task_and_the_pilots_log(
    tq_server: Callable[..., TqServer], pilots: Any, wait_until: Callable[..., Any]
) -> None:
    server = tq_server()
    client = server.operator()
    client.submit(
        {
            "name": "broken",
            "tasks": [{"name": "nope", "command": "no-such-command --flag", "max_retries": 0}],
        }
    )
    pilot = pilots.start(server.url, "p1", "--max-idle", "2")
    wait_until(lambda: client.status().workflows[0].tasks["failed"] == 1, 60, "the task to fail")
    assert pilot.wait(timeout=60) == 0

    shown = cli("tq", "status", "--tq", server.url)
    assert shown.returncode == 0, shown.stderr
    assert "failed=1" in shown.stdout and "failed tasks: 1" in shown.stdout

    listed = cli("tq", "status", "1", "--tasks", "--state", "failed", "--tq", server.url)
    assert listed.returncode == 0, listed.stderr
    (line,) = [row for row in listed.stdout.splitlines() if "nope" in row]
    assert " 127 " in line and "cannot start" in line and "no-such-command" in line
    assert "@T0/p1" in line  # pilot, site and host

    one = cli("tq", "task", "1", "--tq", server.url)
    assert one.returncode == 0, one.stderr
    assert "state:      failed" in one.stdout
    assert "exit code:  127" in one.stdout
    assert "at T0 on p1" in one.stdout
    assert "cannot start" in one.stdout and "attempt 1: failed, exit 127" in one.stdout

    as_json = json.loads(cli("tq", "task", "1", "--json", "--tq", server.url).stdout)
    assert as_json["exit_code"] == 127 and as_json["attempts"][0]["site"] == "T0"

    log = pilots.log("p1")
    assert re.search(r"WARNING task 1 \(nope\) failed with exit code 127: cannot start", log), log
    (task_log,) = (pilots.tmp_path / "pilots" / "p1").rglob("task.log")
    assert "cannot start" in task_log.read_text()

    missing = cli("tq", "task", "99", "--tq", server.url)
    assert missing.returncode != 0 and "no task 99" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_a_queued_task_says_why_it_waits(
    tq_server: Callable[..., TqServer], wait_until: Callable[..., Any]
) -> None:
    server = tq_server()
    server.operator().submit(
        {
            "name": "picky",
            "tasks": [
                {"name": "t", "command": "true", "requirements": 'TARGET.Site == "Elsewhere"'}
            ],
        }
    )
    alone = json.loads(cli("tq", "task", "1", "--json", "--tq", server.url).stdout)
    assert alone["state"] == "queued"
    assert alone["why"].startswith("no matching pilot: no pilot is registered")
    pilot = server.pilot()
    from glidein_ext.tq.client.protocol import Registration

    pilot.register(Registration(site="T0", host="h1", se="", cpus=1, memory=100, disk=100))
    text = cli("tq", "task", "1", "--tq", server.url).stdout
    assert "why:        no matching pilot: none of the 1 live pilot(s) (T0=1)" in text


def test_queued_while_a_matching_pilot_stays_idle_is_warned_in_log_status_and_metrics(
    tq_server: Callable[..., TqServer], wait_until: Callable[..., Any]
) -> None:
    server = tq_server(stuck_interval="1", stuck_queued_after="2", wait_for_data="0")
    # A registered pilot that never asks: idle, and it may run the task.
    from glidein_ext.tq.client.protocol import Registration

    server.pilot().register(Registration(site="T0", host="h1", se="", cpus=1, memory=100, disk=100))
    server.operator().submit({"name": "w", "tasks": [{"name": "t", "command": "true"}]})
    wait_until(lambda: "WARNING stuck:" in server.log(), 30, "the stuck-work warning in the log")
    assert re.search(
        r"WARNING stuck: task 1 \(workflow 1\) has been queued for \d+ s", server.log()
    )
    shown = cli("tq", "status", "--tq", server.url)
    assert "WARNING queued-idle: task 1 (workflow 1)" in shown.stdout
    assert "pilot(s) 1 that may run it stay idle" in shown.stdout
    assert json.loads(cli("tq", "status", "--json", "--tq", server.url).stdout)["warnings"]
    families = _metrics(server)
    samples = {s.labels["kind"]: s.value for s in families["glidein_ext_tq_warnings"].samples}
    assert samples["queued-idle"] == 1


def _metrics(server: TqServer) -> dict[str, Any]:
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as answer:  # noqa: S310
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_metrics_are_prometheus_text_with_requests_tasks_pilots_loops_and_the_dashboard(
    tq_server: Callable[..., TqServer], pilots: Any, wait_until: Callable[..., Any]
) -> None:
    server = tq_server(args=("--log-level", "debug"))
    client = server.operator()
    client.submit({"name": "w", "tasks": [{"name": f"t{i}", "command": "true"} for i in range(3)]})
    pilots.start(server.url, "p1", "--max-idle", "2")
    wait_until(lambda: client.status().workflows[0].tasks["done"] == 3, 60, "the tasks to end")
    families = _metrics(server)
    requests = {
        (s.labels["kind"], s.labels["status"]): s.value
        for s in families["glidein_ext_tq_requests"].samples
        if s.name == "glidein_ext_tq_requests_total"
    }
    assert requests[("register", "200")] == 1
    # a busy pilot reports each task's end with its request for the next: one call each
    assert requests[("complete-and-request", "200")] == 3
    assert requests[("status", "200")] >= 1
    latency = families["glidein_ext_tq_request_duration_seconds"]
    assert latency.type == "histogram"
    counts = [s for s in latency.samples if s.name.endswith("_count")]
    assert any(s.labels["kind"] == "request" and s.value >= 1 for s in counts)
    tasks = {
        (s.labels["workflow"], s.labels["state"]): s.value
        for s in families["glidein_ext_tq_tasks"].samples
    }
    assert tasks[("(finished)", "done")] == 3  # a finished workflow has no series of its own
    pilots_by = {
        (s.labels["site"], s.labels["state"]): s.value
        for s in families["glidein_ext_tq_pilots"].samples
    }
    # T0's, or (other)'s once its one pilot left (--max-idle): a gone site's series leave
    assert sum(v for (site, _), v in pilots_by.items() if site in ("T0", "(other)")) == 1
    loops = {s.labels["loop"] for s in families["glidein_ext_tq_loop_passes"].samples}
    assert {"reaper", "stuck-watch"} <= loops
    done = {
        (s.labels["site"], s.labels["result"]): s.value
        for s in families["glidein_ext_tq_completions"].samples
        if s.name.endswith("_total")
    }
    assert done.get(("T0", "ok"), 0) + done.get(("(other)", "ok"), 0) == 3
    # The request log (--log-level debug): one line per request.
    assert re.search(
        r"DEBUG POST /api/v1/pilots/1/complete-and-request 200 [\d.]+ ms", server.log()
    )
    # Every metric the shipped Grafana dashboard queries is exported.
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", ())]
    assert len(exprs) >= 8
    used = {name for expr in exprs for name in re.findall(r"\b(glidein_ext_tq_[a-z_]+)", expr)}
    exported: set[str] = set()
    for family in families.values():
        exported.update(sample.name for sample in family.samples)
        exported.add(family.name)
        if family.type == "counter":  # a family without samples yet still has its name
            exported.add(f"{family.name}_total")
    assert used and used <= exported, used - exported


def test_status_shows_each_distributed_sites_master_and_epoch(
    tq_server: Callable[..., TqServer],
) -> None:
    from glidein_ext.tq.client.protocol import Claim, Registration

    server = tq_server(architecture="distributed")
    pilot = server.pilot()
    first = pilot.register(Registration(site="T2", host="h1", memory=100, disk=100))
    pilot.register(Registration(site="T2", host="h2", memory=100, disk=100))
    claimed = pilot.claim_master("T2", Claim(first.pilot_id))
    assert claimed.granted and claimed.master is not None
    epoch = claimed.master.epoch
    shown = cli("tq", "status", "--tq", server.url)
    assert shown.returncode == 0, shown.stderr
    (line,) = [row for row in shown.stdout.splitlines() if row.strip().startswith("T2 ")]
    assert line.endswith(f"idle=2  master={first.pilot_id} epoch={epoch}"), line
    masters = json.loads(cli("tq", "status", "--json", "--tq", server.url).stdout)["masters"]
    assert masters == [
        {
            "site": "T2",
            "master_id": first.pilot_id,
            "epoch": epoch,
            "master_seen": masters[0]["master_seen"],
        }
    ]


def test_watch_without_a_value_uses_the_default_period(
    tq_server: Callable[..., TqServer],
) -> None:
    server = tq_server()
    done = cli("tq", "status", "--watch", "--tq", server.url)  # nothing pending: one view
    assert done.returncode == 0, done.stderr
    assert "no workflows" in done.stdout
    bad = cli("tq", "status", "--watch", "0", "--tq", server.url)
    assert bad.returncode != 0 and "--watch must be in" in bad.stderr


def test_a_second_tq_serve_on_the_same_sqlite_file_is_refused_in_one_line(
    tq_server: Callable[..., TqServer], tmp_path: Path
) -> None:
    server = tq_server()
    second = cli(
        "tq",
        "serve",
        "--database",
        server.database,
        "--port",
        "0",
        timeout=60,
    )
    assert second.returncode != 0
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "another tq serve (pid" in lines[0], second.stderr
    assert server.healthy()


def test_a_url_with_a_path_is_refused_in_one_line(tq_server: Callable[..., TqServer]) -> None:
    server = tq_server()
    done = cli("tq", "status", "--tq", f"{server.url}/api/v1")
    assert done.returncode != 0
    assert "without a path" in done.stderr and f"(give {server.url})" in done.stderr


@pytest.mark.skipif(not openssl_available(), reason="needs the openssl command")
def test_tls_mistakes_are_each_one_clear_line(
    tq_server: Callable[..., TqServer], tmp_path: Path, wait_until: Callable[..., Any]
) -> None:
    pki = make_pki(tmp_path / "pki")
    server = tq_server("tls", tls=pki)
    plain = cli("tq", "status", "--tq", server.url.replace("https://", "http://"))
    assert plain.returncode != 0
    assert f"is it {server.url}?" in plain.stderr, plain.stderr

    # --tls-cert without --tls-key (the key in another file)
    alone = cli(
        "tq",
        "serve",
        "--database",
        str(tmp_path / "a.sqlite"),
        "--port",
        "0",
        "--tls-cert",
        str(pki.cert),
    )
    assert alone.returncode != 0 and "holds no private key" in alone.stderr
    assert "PEM lib" not in alone.stderr

    # A self-signed certificate without subjectAltName: the service warns, clients say why.
    cert, key = self_signed(tmp_path, "nosan", subject="/CN=127.0.0.1")
    port_file = tmp_path / "nosan.port"
    log_path = tmp_path / "nosan.log"
    with open(log_path, "wb") as log:
        serving = subprocess.Popen(
            [
                *(sys.executable, "-m", "glidein_ext", "tq", "serve"),
                *("--database", str(tmp_path / "nosan.sqlite"), "--port", "0"),
                *("--port-file", str(port_file), "--tls-cert", str(cert), "--tls-key", str(key)),
            ],
            env={**os.environ, "GLIDEIN_EXT_TQ_OPERATOR_TOKEN": OPERATOR},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_until(port_file.exists, 30, "the port file")
        wait_until(lambda: "listening" in log_path.read_text(), 30, "the service to listen")
        assert "has no subjectAltName" in log_path.read_text()
        https = f"https://127.0.0.1:{port_file.read_text().strip()}"
        refused = cli("tq", "status", "--tq", https, "--ca-file", str(cert))
    finally:
        serving.terminate()
        serving.wait(timeout=30)
    assert refused.returncode != 0
    assert "subjectAltName" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1


def test_pilot_run_mistakes_are_one_line_each(tmp_path: Path) -> None:
    base = ("pilot", "run", "--tq", "http://127.0.0.1:9", "--token", PILOT, "--min-free-mb", "1")
    spaced = cli(*base, "--site", "Site A", "--workdir", str(tmp_path / "w"))
    assert spaced.returncode != 0 and "--site 'Site A'" in spaced.stderr
    assert len(spaced.stderr.strip().splitlines()) == 1

    deep = tmp_path / "nonexistent" / "x"
    nested = cli(*base, "--site", "T0", "--workdir", str(deep))
    assert nested.returncode != 0 and "does not exist" in nested.stderr
    assert not deep.parent.exists()

    # The Task Queue is down: N pilots, a few lines, no traceback.
    down = cli(
        *base,
        "--site",
        "T0",
        "--workdir",
        str(tmp_path / "w"),
        "--pilots",
        "20",
        "--retry-for",
        "1",
        timeout=120,
    )
    assert down.returncode != 0
    lines = down.stderr.strip().splitlines()
    assert len(lines) <= 8, down.stderr
    assert "every pilot of the swarm failed: cannot reach the Task Queue" in lines[-1]


def test_pilot_run_with_a_wrong_token_says_so_once(
    tq_server: Callable[..., TqServer], tmp_path: Path
) -> None:
    server = tq_server()
    done = cli(
        *("pilot", "run", "--tq", server.url, "--token", "wrong", "--site", "T0"),
        *("--workdir", str(tmp_path / "w"), "--min-free-mb", "1", "--pilots", "10"),
        timeout=120,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) <= 4, done.stderr
    assert "token" in lines[-1]
