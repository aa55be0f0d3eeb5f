"""A pool of Task Queue instances on one PostgreSQL database (Lee 2003): 1, 2 and 3 instances.

    .venv/bin/python bench/pool_bench.py [--quick] [--pilots 1500] [--loop-pilots 150]
        [--loop-tasks 3000]

A throw-away PostgreSQL server (``glidein_ext.testbed.postgres``) and, per configuration, a fresh
database and N real ``glidein-ext tq serve`` processes on it; the load generator's pilots talk
plain HTTP/1.1 keep-alive to the instances in turn (pilot i to instance i mod N).

1. Request loop: ``--loop-pilots`` registered pilots ask for a task and report it, again and
   again, until ``--loop-tasks`` tasks are done: requests per second (request + complete) and the
   latency of a request (p50, p99).
2. Burst: ``--pilots`` (1,500) pilots register, ask for a task and report it, all at once
   (``bench/tq_bench.py``'s burst over the pool).  Targets: under 3 s with 3 instances (on 16
   cores), and at most 1 ms of TQ CPU per call in every row.

Each row is compared with the one-instance row of the same run; "TQ cpu ms/call" is the CPU
time all the instances used per call (from /proc: what a call costs, whatever else loads the
machine), so the work the pool adds (each instance absorbing the others' changes) shows even
where the wall-clock rates are bound by the cores.  ``--quick``: 300 pilots in the
burst, 40 pilots and 400 tasks in the loop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BURST_TARGET = 3.0  # seconds, 3 instances, 1,500 pilots (on 16 cores)
CPU_TARGET_MS = 1.0  # TQ CPU per call
OPERATOR, PILOT = "bench-op", "bench-pilot"


def _q(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000 if ordered else 0.0


async def _submit(port: int, tasks: int) -> None:
    from bench.tq_bench import submit_tasks

    await submit_tasks(port, tasks, "pool")


async def _pilot_call(conn: Any, path: str, body: Any, latencies: list[float] | None) -> Any:
    start = time.perf_counter()
    code, answer = await conn.call("POST", path, body)
    if latencies is not None:
        latencies.append(time.perf_counter() - start)
    if code != 200:
        raise RuntimeError(f"{path}: HTTP {code} {str(answer)[:100]}")
    return answer


async def _loop(ports: Sequence[int], pilots: int, tasks: int) -> dict[str, Any]:
    """``pilots`` registered pilots request and complete until ``tasks`` tasks are done."""
    from bench.tq_bench import BURST_ERRORS
    from bench.tq_bench import _Connection as Connection

    await _submit(ports[0], tasks)
    latencies: list[float] = []
    errors: list[str] = []
    calls = 0
    conns = [Connection(ports[i % len(ports)], PILOT) for i in range(pilots)]

    async def register(i: int) -> int:
        reg = {"site": f"S{i % 5}", "host": f"wn{i}", "cpus": 1, "ttl": 86400}
        return int((await _pilot_call(conns[i], "/api/v1/pilots", reg, None))["pilot_id"])

    async def work(i: int, pid: int) -> None:
        nonlocal calls
        try:
            while True:
                got = await _pilot_call(conns[i], f"/api/v1/pilots/{pid}/request", {}, latencies)
                calls += 1
                task = got["task"]
                if task is None:
                    return
                body = {"task_id": task["task_id"], "attempt": task["attempt"], "exit_code": 0}
                await _pilot_call(conns[i], f"/api/v1/pilots/{pid}/complete", body, None)
                calls += 1
        except BURST_ERRORS as exc:
            errors.append(f"{type(exc).__name__}: {exc}")

    try:
        ids = await asyncio.gather(*(register(i) for i in range(pilots)))
        start = time.perf_counter()
        await asyncio.gather(*(work(i, pid) for i, pid in enumerate(ids)))
        elapsed = time.perf_counter() - start
    finally:
        for conn in conns:
            await conn.close()
    return {"elapsed": elapsed, "calls": calls, "latencies": latencies, "errors": errors}


async def _burst(ports: Sequence[int], pilots: int) -> dict[str, Any]:
    """Every pilot registers, requests and completes once, all at once."""
    from bench.tq_bench import _Connection as Connection
    from bench.tq_bench import burst_rounds

    await _submit(ports[0], pilots)
    latencies: list[float] = []

    elapsed, errors = await burst_rounds(
        pilots,
        lambda i: Connection(ports[i % len(ports)], PILOT),
        lambda conn, _op, path, body: _pilot_call(conn, path, body, latencies),
    )
    return {"elapsed": elapsed, "calls": 3 * pilots, "latencies": latencies, "errors": errors}


def _run(kind: str, url: str, count: int, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    from glidein_ext.testbed.tq_server import TqServer

    with ExitStack() as stack:
        servers = [
            stack.enter_context(
                TqServer(
                    tmp / f"{kind}-{count}-{i}",
                    database=url,
                    operator_token=OPERATOR,
                    pilot_token=PILOT,
                )
            )
            for i in range(count)
        ]
        ports = [server.port for server in servers]
        pids = [server.process.pid for server in servers if server.process is not None]
        before = _cpu_seconds(pids)
        if kind == "loop":
            result = asyncio.run(_loop(ports, args.loop_pilots, args.loop_tasks))
        else:
            result = asyncio.run(_burst(ports, args.pilots))
        result["cpu"] = _cpu_seconds(pids) - before
        return result


def _verdict(met: bool) -> str:
    return "target met" if met else "target MISSED"


def _cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds the processes used so far (/proc; robust to a loaded machine,
    unlike wall time): what the pool costs per call, whatever else runs."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / ticks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small: 300-pilot burst, short loop")
    parser.add_argument("--pilots", type=int, default=None, help="burst size (default 1500)")
    parser.add_argument("--loop-pilots", type=int, default=None, help="default 150")
    parser.add_argument("--loop-tasks", type=int, default=None, help="default 3000")
    parser.add_argument("--instances", type=int, default=3, help="up to this many (default 3)")
    args = parser.parse_args()
    args.pilots = args.pilots or (300 if args.quick else 1500)
    args.loop_pilots = args.loop_pilots or (40 if args.quick else 150)
    args.loop_tasks = args.loop_tasks or (400 if args.quick else 3000)
    if str(REPO) not in sys.path:  # run as `python bench/pool_bench.py`: bench.tq_bench from here
        sys.path.insert(0, str(REPO))
    from glidein_ext.errors import ConfigError
    from glidein_ext.testbed.postgres import start_pg_server

    results: dict[tuple[str, int], dict[str, Any]] = {}
    try:
        with (
            contextlib.contextmanager(start_pg_server)() as pg,
            tempfile.TemporaryDirectory(prefix="pool-bench-") as tmp,
        ):
            for kind in ("loop", "burst"):
                for count in range(1, args.instances + 1):
                    url = pg.create_database()
                    result = results[(kind, count)] = _run(kind, url, count, Path(tmp), args)
                    # each run as it ends: a bench cut short keeps what it measured
                    print(
                        f"  {kind} with {count}: {result['elapsed']:.2f} s, "
                        f"{result['calls'] / result['elapsed']:.0f} calls/s, "
                        f"{1000 * result['cpu'] / max(1, result['calls']):.2f} ms CPU a call",
                        flush=True,
                    )
    except ConfigError as exc:  # no PostgreSQL here (MissingDependencyError): one line
        sys.exit(f"pool_bench: {exc}")

    print(
        f"Pool of Task Queue instances on one PostgreSQL database ({args.loop_pilots} pilots "
        f"looping over {args.loop_tasks} tasks; a burst of {args.pilots} pilots)"
    )
    header = (
        f"{'run':<7} {'instances':>9} {'seconds':>8} {'calls/s':>8} {'vs 1':>6} "
        f"{'p50 ms':>8} {'p99 ms':>8} {'TQ cpu ms/call':>14} {'errors':>6}  target"
    )
    print(header)
    failed = False
    for (kind, count), result in results.items():
        base = results[(kind, 1)]
        rate = result["calls"] / result["elapsed"]
        speedup = rate / (base["calls"] / base["elapsed"])
        per_call = 1000 * result["cpu"] / max(1, result["calls"])
        target = f"cpu <= {CPU_TARGET_MS:.0f} ms: {_verdict(per_call <= CPU_TARGET_MS)}"
        if kind == "burst" and count == 3 and args.pilots == 1500:
            met = _verdict(result["elapsed"] < BURST_TARGET)
            target += f"; < {BURST_TARGET:.0f} s: {met}"
        lat = result["latencies"]
        print(
            f"{kind:<7} {count:>9} {result['elapsed']:>8.2f} {rate:>8.0f} {speedup:>5.2f}x "
            f"{_q(lat, 0.5):>8.1f} {_q(lat, 0.99):>8.1f} "
            f"{per_call:>14.2f} "
            f"{len(result['errors']):>6}  {target}"
        )
        for line in result["errors"][:3]:
            print(f"    {line}")
        failed = failed or bool(result["errors"])
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
