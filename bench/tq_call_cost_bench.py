"""Where a busy pilot's call costs the Task Queue its CPU: the whole call and its parts, one run.

    .venv/bin/python bench/tq_call_cost_bench.py [--quick] [--calls 4000] [--repeat 3]

A busy pilot makes one call per task, ``complete-and-request`` (docs/tq.md).  Each row is CPU
milliseconds per call (``time.process_time`` in-process; /proc for a server process), the
median of ``--repeat`` runs, each row in turn within a repetition:

- **whole call**: a live ``tq serve`` (SQLite, centralized) answering 8 registered pilots, one
  client thread calling for each in turn with the keep-alive client the pilots use, no task
  run: the service's CPU per call, as ``bench/taskvine_bench.py`` counts it per task;
- **HTTP server floor**: uvicorn with the service's own HTTP protocol (``tq.service.httpguard``)
  and an application that answers a constant answer of the same size: the same client;
- **application without the store**: the service's whole ASGI application in-process (the
  guard, the counters, the metrics, the fast path, pydantic's check of the body, the answer's
  JSON), its store's ``complete_and_request`` answered by a stub;
- **store alone**: ``Store.complete_and_request`` in-process on a SQLite file (its statements,
  the commit, the matcher's choice);
- **submission, per task**: ``tq serve``'s CPU for a 2,000-task workflow of ``/bin/true``;
- **reports, 2, 4, 8 in a request**: the whole call's setting, the pilots' calls sent that many
  at a time in one ``POST /api/v1/pilots/reports`` (``pilot run --batch-reports``), per call;
  with the one-call row, what a request costs and what each call in it costs.

The parts add up to about the whole; the table says by how much.  This is a decomposition, not
a comparison: ``bench/taskvine_bench.py`` runs TaskVine beside us.  ``--quick``: 1,000 calls,
one repetition.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from glidein_ext.testbed.tq_server import TqServer
from glidein_ext.testbed.vine_compare import trivial_workflow
from glidein_ext.tq.client import protocol as p
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.models import Architecture
from glidein_ext.tq.service.db import make_engine, migrate
from glidein_ext.tq.service.settings import TqSettings
from glidein_ext.tq.service.store import Store
from glidein_ext.tq.workflow import parse_workflow

REPO = Path(__file__).resolve().parent.parent
PILOTS = 8
PILOT_TOKEN = "p" * 32  # the bench's own tokens
OPERATOR_TOKEN = "o" * 32
API = "/api/v1"


def _cpu(pid: int) -> float:
    from bench.tq_bench import process_cpu  # on the path: main()

    return process_cpu([pid])


def _completion(task: p.TaskAssignment) -> p.CompleteAndRequest:
    now = time.time()
    return p.CompleteAndRequest(
        p.Completion(task.task_id, task.attempt, 0, started_at=now, ended_at=now)
    )


def _store(directory: Path, tasks: int) -> tuple[Store, dict[int, p.TaskAssignment | None]]:
    """A SQLite store with ``tasks`` trivial tasks and 8 pilots each holding one."""
    engine = make_engine(str(directory / "tq.sqlite"))
    migrate(engine)
    store = Store(engine, default_architecture=Architecture.CENTRALIZED)
    store.load()
    store.submit(parse_workflow(trivial_workflow("w", tasks)))
    ids = [store.register(p.Registration(site="S", host=f"h{i}")).pilot_id for i in range(PILOTS)]
    return store, {i: store.request(i) for i in ids}


def _in_turn(
    held: dict[int, p.TaskAssignment | None],
    call: Callable[[int, p.TaskAssignment], p.TaskAssignment | None],
    calls: int,
) -> int:
    """``calls`` calls (fewer if the pilots run out of tasks), one pilot after another, each
    reporting its task and taking the next; how many were made."""
    done = 0
    while done < calls and any(held.values()):
        for pilot_id, task in held.items():
            if task is not None and done < calls:
                held[pilot_id] = call(pilot_id, task)
                done += 1
    return done


def store_alone(calls: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        store, held = _store(Path(tmp), calls + PILOTS)
        started = time.process_time()
        done = _in_turn(
            held,
            lambda pilot_id, task: store.complete_and_request(pilot_id, _completion(task)).task,
            calls,
        )
        cpu = time.process_time() - started
        store.engine.dispose()
    return cpu / done


def app_without_store(calls: int) -> float:
    from glidein_ext.tq.service.server import build_app

    with tempfile.TemporaryDirectory() as tmp:
        store, held = _store(Path(tmp), PILOTS)
        answer = p.CompleteAndRequestAnswer(
            p.CompletionAnswer(True, False, "done"), next(t for t in held.values() if t)
        )
        store.complete_and_request = lambda pilot_id, call: answer  # type: ignore[method-assign]
        app = build_app(store, TqSettings(operator_token=OPERATOR_TOKEN, pilot_token=PILOT_TOKEN))
        cpu = asyncio.run(_drive(app, list(held), answer, calls))
        store.engine.dispose()
    return cpu


async def _drive(app: Any, pilots: list[int], answer: Any, calls: int) -> float:
    async def call(pilot_id: int, body: bytes) -> None:
        sent: list[Any] = []
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict[str, Any]:
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            sent.append(message)

        path = f"{API}/pilots/{pilot_id}/complete-and-request"
        headers = [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"authorization", f"Bearer {PILOT_TOKEN}".encode()),
        ]
        scope = dict(
            type="http", method="POST", path=path, headers=headers, query_string=b"", root_path=""
        )
        scope.update(http_version="1.1", client=("127.0.0.1", 40000))
        await app(scope, receive, send)
        if sent[0]["status"] != 200:
            raise RuntimeError(f"the application answered {sent}")

    task = answer.task
    started = time.process_time()
    for pilot_id in itertools.islice(itertools.cycle(pilots), calls):
        await call(pilot_id, json.dumps(p.to_json(_completion(task))).encode())
    return (time.process_time() - started) / calls


def _constant_server(ready: Any, body: bytes) -> None:
    """uvicorn with the service's HTTP protocol and a constant answer (a child process)."""
    import uvicorn

    from glidein_ext.tq.service import httpguard

    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    ready.put(sock.getsockname()[1])
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        http=httpguard.deadline_protocol(10, 60),
        timeout_keep_alive=httpguard.KEEP_ALIVE,
    )
    uvicorn.Server(config).run(sockets=[sock])


def http_floor(calls: int) -> float:
    task = p.TaskAssignment(1234, 1, "t1", "true", (), (), 3600, 0)
    answer = p.CompleteAndRequestAnswer(p.CompletionAnswer(True, False, "done"), task)
    body = json.dumps(p.to_json(answer), separators=(",", ":")).encode()
    ready: Any = multiprocessing.Queue()
    server = multiprocessing.Process(target=_constant_server, args=(ready, body), daemon=True)
    server.start()
    try:
        port = ready.get(timeout=60)
        client = TqClient(f"http://127.0.0.1:{port}", PILOT_TOKEN)
        request = p.to_json(_completion(task))
        path = f"{API}/pilots/1/complete-and-request"
        for _ in range(100):  # connected, warm
            client.call("POST", path, request)
        assert server.pid is not None
        before = _cpu(server.pid)
        for _ in range(calls):
            client.call("POST", path, p.to_json(_completion(task)))
        return (_cpu(server.pid) - before) / calls
    finally:
        server.terminate()
        server.join(10)


def _served(directory: Path) -> TqServer:
    return TqServer(
        directory,
        args=["--architecture", "centralized"],
        operator_token=OPERATOR_TOKEN,
        pilot_token=PILOT_TOKEN,
    ).start()


def whole_call(calls: int, together: int = 1) -> float:
    """The service's CPU per call; ``together`` > 1: the pilots' calls that many at a time in
    one ``reports`` request (the pilots of one process, ``pilot run --batch-reports``)."""
    with tempfile.TemporaryDirectory() as tmp:
        server = _served(Path(tmp))
        try:
            assert server.process is not None
            pilot = server.pilot()
            hosts = [p.Registration(site="S", host=f"h{i}") for i in range(PILOTS)]
            ids = [pilot.register(host).pilot_id for host in hosts]
            server.operator().submit(trivial_workflow("calls", calls + PILOTS))
            held = {i: pilot.request(i) for i in ids}
            before = _cpu(server.process.pid)

            def call(pilot_id: int, task: p.TaskAssignment) -> p.TaskAssignment | None:
                return pilot.complete_and_request(pilot_id, _completion(task).completion).task

            done = (
                _in_turn(held, call, calls)
                if together == 1
                else _together(pilot, held, calls, together)
            )
            return (_cpu(server.process.pid) - before) / done
        finally:
            server.stop()


def _together(
    pilot: TqClient, held: dict[int, p.TaskAssignment | None], calls: int, size: int
) -> int:
    """``calls`` calls, the pilots' ``size`` at a time in one ``reports`` request; how many."""
    done = 0
    ids = list(held)
    while done < calls and any(held.values()):
        for start in range(0, len(ids), size):
            group = {i: task for i in ids[start : start + size] if (task := held[i]) is not None}
            if not group:
                continue
            reports = [p.PilotReport(i, _completion(task).completion) for i, task in group.items()]
            for pilot_id, outcome in zip(group, pilot.reports(reports), strict=True):
                if not isinstance(outcome, p.CompleteAndRequestAnswer):
                    raise outcome
                held[pilot_id] = outcome.task
            done += len(group)
    return done


def submission(tasks: int = 2000) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        server = _served(Path(tmp))
        try:
            assert server.process is not None
            operator = server.operator()
            before = _cpu(server.process.pid)
            operator.submit(trivial_workflow("submitted", tasks))  # answered once stored
            time.sleep(1.0)  # and the work after the answer, if any
            return (_cpu(server.process.pid) - before) / tasks
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if str(REPO) not in sys.path:  # run as `python bench/tq_call_cost_bench.py`: bench.tq_bench
        sys.path.insert(0, str(REPO))
    calls, repeat = (1000, 1) if args.quick else (args.calls, args.repeat)
    rows: list[tuple[str, Callable[[], float]]] = [
        ("whole call (tq serve, complete-and-request)", lambda: whole_call(calls)),
        ("  HTTP server floor (uvicorn, constant answer)", lambda: http_floor(calls)),
        ("  application without the store (in-process)", lambda: app_without_store(calls)),
        ("  store alone (in-process, SQLite)", lambda: store_alone(calls)),
        ("submission, per task (2,000 tasks)", submission),
        ("reports, 2 in a request (tq serve, per report)", lambda: whole_call(calls, 2)),
        ("reports, 4 in a request", lambda: whole_call(calls, 4)),
        ("reports, 8 in a request", lambda: whole_call(calls, 8)),
    ]
    load = os.getloadavg()
    print(f"load average before: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; {calls} calls")
    seen: dict[str, list[float]] = {name: [] for name, _ in rows}
    for _ in range(repeat):
        for name, measure in rows:
            seen[name].append(measure() * 1000)
    median = {name: statistics.median(values) for name, values in seen.items()}
    print(f"{'part':<48} {'CPU ms/call':>11}  runs")
    for name, _ in rows:
        runs = " ".join(f"{v:.3f}" for v in seen[name])
        print(f"{name:<48} {median[name]:>11.3f}  {runs}")
    whole = median[rows[0][0]]
    parts = sum(median[name] for name, _ in rows[1:4])
    print(f"{'  sum of the three parts':<48} {parts:>11.3f}  ({parts / whole:.0%} of the whole)")
    print(f"{'whole call + submission, per task':<48} {whole + median[rows[4][0]]:>11.3f}")
    # cost(k) = per request / k + per report, from one report a request and eight
    eight = median[rows[7][0]]
    per_request = (whole - eight) * 8 / 7
    print(
        f"{'  per request / per report (from 1 and 8)':<48} {per_request:>11.3f}"
        f" / {whole - per_request:.3f}"
    )
    load = os.getloadavg()
    print(f"load average after: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")


if __name__ == "__main__":
    main()
