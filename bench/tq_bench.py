"""Task Queue benchmarks: matching one request against 10,000 queued tasks, and a pilot burst.

    .venv/bin/python bench/tq_bench.py [--quick] [--matching-only | --burst-only]

1. Matching (Hasham 2011 §IV-E).  10,000 queued tasks in a realistic number of match groups
   (distinct Requirements/Rank), each reading one or two LFNs; one pilot with cached files asks for
   a task.
   Shown beside the naive way, in the same run: classad2 ``symmetricMatch`` + Rank on every task's
   own ad.  Cold is a pilot's first request (every group evaluated), warm a later one (verdicts
   cached per pilot and group); the worst case gives every task its own Requirements.
   Target: under 20 ms per request.  Then the same with ``--big`` (1,000,000; ``--quick``:
   100,000) tasks queued in ``--groups`` groups (DIRAC's TaskQueueDB picks one job out of up to a
   million waiting): the matcher's memory (the growth of this process's resident set while it
   is filled) and the database's size per task (a sample of ``--store-sample`` tasks submitted
   through the store to a SQLite file, times the size), both in the table.
2. Burst.  A real `glidein-ext tq serve` on 127.0.0.1 (SQLite file) and N pilots (1,500) that all
   register, ask for a task and report it over real HTTP at once.  Errors must be 0.  Targets:
   the burst under 5 s, and under 1 ms of the TQ process's CPU per call (user + system time of
   the process over the calls, from /proc: what a call costs, whatever else loads the machine).

Every target line says "target met" or "target MISSED".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from glidein_ext import classads
from glidein_ext.tq.models import MatchSpec, PilotInfo, QueuedTask
from glidein_ext.tq.service.matching.match_groups import pilot_ad, task_ad
from glidein_ext.tq.service.matching.matcher import Matcher

TARGET_MS = 20.0
BURST_TARGET_S = 5.0  # 1,500 pilots, one SQLite instance
CPU_TARGET_MS = 1.0  # TQ CPU per call
OPERATOR, PILOT = "bench-op", "bench-pilot"
SITES = ["T0_CH_CERN", "T1_ES_PIC", "T2_ES_CIEMAT", "T2_UK_Bristol", "T3_US_FNAL"]


def _specs(groups: int, rng: random.Random) -> list[MatchSpec]:
    specs = []
    for g in range(groups):
        site = rng.choice(SITES)
        specs.append(
            MatchSpec(
                requirements=(
                    f'(TARGET.Site == "{site}" || TARGET.Memory >= {1000 + g}) '
                    f"&& TARGET.Cpus >= MY.RequestCpus"
                ),
                rank=f"TARGET.Memory / 1000 + {g % 7}",
                request_cpus=rng.choice([1, 2]),
                max_runtime=rng.choice([600, 3600]),
                attributes=(("Workflow", f"wf{g}"),),
            )
        )
    return specs


def _tasks(n: int, groups: int, seed: int = 1) -> list[QueuedTask]:
    rng = random.Random(seed)
    specs = _specs(groups, rng)
    return [
        QueuedTask(
            i,
            specs[i % groups],
            tuple(f"/store/f{rng.randrange(n)}" for _ in range(rng.choice([1, 2]))),
            rng.randint(0, 3),
        )
        for i in range(1, n + 1)
    ]


def _pilot(pilot_id: int, rng: random.Random, n: int) -> PilotInfo:
    return PilotInfo(
        pilot_id,
        site=rng.choice(SITES),
        host=f"wn{pilot_id}",
        cpus=4,
        memory=rng.choice([2000, 4000]),
        disk=20000,
        cached={f"/store/f{rng.randrange(n)}" for _ in range(20)},
    )


def _ms(values: list[float]) -> str:
    values = sorted(values)
    p95 = values[min(len(values) - 1, int(0.95 * len(values)))]
    return f"{statistics.median(values) * 1000:9.2f} {p95 * 1000:9.2f}"


def bench_matching(n: int, groups: int, pilots: int) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    rng = random.Random(2)
    tasks = _tasks(n, groups)

    # Naive: every task's own ad, classad2 symmetricMatch + Rank, then the best one.
    ads = [task_ad(t.spec) for t in tasks]
    naive: list[float] = []
    for pilot_id in range(1, min(pilots, 3) + 1):
        p_ad = pilot_ad(_pilot(pilot_id, rng, n))
        start = time.perf_counter()
        best = max(
            (
                (classads.rank(p_ad, ad), classads.rank(ad, p_ad), -t.task_id)
                for t, ad in zip(tasks, ads, strict=True)
                if ad.symmetricMatch(p_ad)
            ),
            default=None,
        )
        naive.append(time.perf_counter() - start)
        assert best is not None
    rows.append((f"naive classad2, {n} tasks", _ms(naive), "-"))

    configs = ((f"{groups} groups", groups), ("worst: 1 task/group", n))
    for (label, group_count), with_cache in itertools.product(configs, (True, False)):
        matcher = Matcher(wait_for_data=60.0)
        for task in _tasks(n, group_count):
            matcher.add_task(task)
        count = pilots if group_count < n else 3
        what = f"{label}, {'20 cached LFNs' if with_cache else 'empty cache'}"
        rows += _choose_rows(matcher, rng, n, count, with_cache, f"grouped {{}}, {what}")
    return rows


def _choose_rows(
    matcher: Matcher, rng: random.Random, n: int, pilots: int, with_cache: bool, label: str
) -> list[tuple[str, str, str]]:
    """Pilots 1..``pilots`` join and choose twice each (cold, then warm): a row for each, named
    ``label.format(kind)``."""
    cold: list[float] = []
    warm: list[float] = []
    for pilot_id in range(1, pilots + 1):
        info = _pilot(pilot_id, rng, n)
        if not with_cache:
            info.cached = set()
        matcher.add_pilot(info)
        for sample in (cold, warm):
            start = time.perf_counter()
            choice = matcher.choose(pilot_id, now=0.0)
            sample.append(time.perf_counter() - start)
            assert choice is not None
    return [
        (label.format(kind), _ms(sample), verdict(statistics.median(sample) * 1000 < TARGET_MS))
        for kind, sample in (("cold", cold), ("warm", warm))
    ]


def verdict(met: bool) -> str:
    return "target met" if met else "target MISSED"


def _rss_mb() -> float:
    """This process's resident set now, MB (/proc)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def process_cpu(pids: Sequence[int]) -> float:
    """User + system CPU seconds the processes used so far (/proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def bench_big(n: int, groups: int, pilots: int) -> list[tuple[str, str, str]]:
    """Matching with ``n`` tasks queued in ``groups`` groups, and the matcher's memory."""
    rng = random.Random(3)
    gc.collect()
    before = _rss_mb()
    start = time.perf_counter()
    matcher = Matcher(wait_for_data=60.0)
    for task in _tasks(n, groups):
        matcher.add_task(task)
    filled = time.perf_counter() - start
    gc.collect()
    grown = _rss_mb() - before
    rows = [
        (
            f"matcher memory, {n:,} tasks ({filled:.0f} s to fill)",
            f"{grown:>9.0f} {1e6 * grown / n:>9.0f}",
            "MB, bytes/task",
        )
    ]
    for with_cache in (True, False):
        what = f"{n:,} tasks, {groups} groups, {'20 cached LFNs' if with_cache else 'empty cache'}"
        rows += _choose_rows(matcher, rng, n, pilots, with_cache, f"{{}}, {what}")
    return rows


def bench_store_size(sample: int, n: int) -> tuple[str, str, str]:
    """The SQLite database's bytes per queued task (``sample`` submitted through the store), and
    its size at ``n`` tasks."""
    from glidein_ext.tq.service.server import open_store
    from glidein_ext.tq.service.settings import TqSettings
    from glidein_ext.tq.workflow import parse_workflow

    with tempfile.TemporaryDirectory(prefix="tq-bench-store-") as tmp:
        path = Path(tmp) / "tq.sqlite"
        store = open_store(TqSettings(database=str(path)))
        empty = path.stat().st_size
        chunk = 10_000
        for first in range(0, sample, chunk):
            tasks = [
                {"name": f"t{i}", "command": "true", "requirements": f'TARGET.Site == "S{i % 50}"'}
                for i in range(first, min(sample, first + chunk))
            ]
            store.submit(parse_workflow({"name": f"w{first}", "tasks": tasks}))
        store.engine.dispose()
        per_task = (path.stat().st_size + _wal_size(path) - empty) / sample
    return (
        f"database (SQLite) at {n:,} tasks, from {sample:,} submitted",
        f"{per_task * n / 2**20:>9.0f} {per_task:>9.0f}",
        "MB, bytes/task",
    )


def _wal_size(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


# --- the HTTP burst ---


class _Connection:
    """One pilot's keep-alive HTTP/1.1 connection (a plain asyncio stream: the load generator
    must cost far less than the server, which httpx's async pool does not at 1,500 connections).
    """

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.token = token
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        data = json.dumps(body).encode() if body is not None else b""
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {self.token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        )
        self.writer.write(head.encode() + data)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("connection closed")
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        payload = await self.reader.readexactly(length)
        return int(status_line.split()[1]), json.loads(payload or b"null")

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()


async def submit_tasks(port: int, tasks: int, name: str) -> None:
    """Submit ``tasks`` trivial tasks spread over sites S0..S4 (the burst's and the pool's)."""
    operator = _Connection(port, OPERATOR)
    workflow = {
        "name": name,
        "tasks": [
            {"name": f"t{i}", "command": "true", "requirements": f'TARGET.Site == "S{i % 5}"'}
            for i in range(tasks)
        ],
    }
    code, answer = await operator.call("POST", "/api/v1/workflows", workflow)
    await operator.close()
    if code != 200:
        raise SystemExit(f"submit failed: {code} {str(answer)[:200]}")


# What a burst's pilot call may fail with: counted as the run's errors, not raised.
BURST_ERRORS = (OSError, RuntimeError, KeyError, ValueError, asyncio.IncompleteReadError)


async def pilot_round(i: int, call: Callable[[str, str, Any], Awaitable[Any]]) -> None:
    """Pilot ``i`` registers, asks for a task and completes it: a burst's three calls, each
    made by ``call(op, path, body)`` (the answer of an HTTP 200; anything else raises)."""
    reg = {"site": f"S{i % 5}", "host": f"wn{i}", "cpus": 1, "ttl": 86400}
    pid = (await call("register", "/api/v1/pilots", reg))["pilot_id"]
    task = (await call("request", f"/api/v1/pilots/{pid}/request", {}))["task"]
    if task is None:
        raise RuntimeError("no task for a pilot while tasks are queued")
    body = {"task_id": task["task_id"], "attempt": task["attempt"], "exit_code": 0}
    done = await call("complete", f"/api/v1/pilots/{pid}/complete", body)
    if not done["accepted"]:
        raise RuntimeError("completion not accepted")


async def burst_rounds(
    pilots: int,
    connect: Callable[[int], _Connection],
    call: Callable[[_Connection, str, str, Any], Awaitable[Any]],
) -> tuple[float, list[str]]:
    """Every pilot's round (:func:`pilot_round`) at once, pilot ``i`` on its own connection
    ``connect(i)`` through ``call(conn, op, path, body)``: the seconds they took, their errors."""
    errors: list[str] = []

    async def one(i: int) -> None:
        conn = connect(i)
        try:
            await pilot_round(i, lambda op, path, body: call(conn, op, path, body))
        except BURST_ERRORS as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            await conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(pilots)))
    return time.perf_counter() - start, errors


async def _burst(
    port: int, pilots: int, tasks: int, cpu: Callable[[], float] = lambda: 0.0
) -> dict[str, Any]:
    """``cpu``: the TQ's CPU seconds so far (counted over the calls, not the submit)."""
    latencies: dict[str, list[float]] = {"register": [], "request": [], "complete": []}
    await submit_tasks(port, tasks, "burst")
    cpu_before = cpu()

    async def timed(conn: _Connection, op: str, path: str, body: Any) -> Any:
        start = time.perf_counter()
        code, answer = await conn.call("POST", path, body)
        latencies[op].append(time.perf_counter() - start)
        if code != 200:
            raise RuntimeError(f"{op}: HTTP {code} {str(answer)[:100]}")
        return answer

    elapsed, errors = await burst_rounds(pilots, lambda i: _Connection(port, PILOT), timed)
    return {"latencies": latencies, "errors": errors, "elapsed": elapsed, "cpu": cpu() - cpu_before}


def bench_burst(pilots: int, tasks: int) -> tuple[dict[str, Any], int]:
    from glidein_ext.testbed.tq_server import TqServer

    with (
        tempfile.TemporaryDirectory(prefix="tq-bench-") as tmp,
        TqServer(Path(tmp), operator_token=OPERATOR, pilot_token=PILOT) as server,
    ):
        assert server.process is not None
        pid = server.process.pid
        result = asyncio.run(_burst(server.port, pilots, tasks, lambda: process_cpu([pid])))
    return result, pilots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller burst (under a minute)")
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--pilots", type=int, default=None, help="burst size (default 1500)")
    parser.add_argument("--big", type=int, default=None, help="default 1,000,000 (quick: 100,000)")
    parser.add_argument("--store-sample", type=int, default=None, help="default 20,000 (2,000)")
    parser.add_argument(
        "--matching-only", action="store_true", help="only the 10,000-task matching table"
    )
    parser.add_argument("--burst-only", action="store_true", help="only the pilot burst")
    args = parser.parse_args()
    burst_pilots = args.pilots or (300 if args.quick else 1500)
    big = args.big or (100_000 if args.quick else 1_000_000)
    sample = args.store_sample or (2_000 if args.quick else 20_000)

    if not args.burst_only:
        print(
            f"Matching one request against {args.tasks} queued tasks (target < {TARGET_MS:.0f} ms)"
        )
        print(f"{'method':<52} {'median ms':>9} {'p95 ms':>9}  target")
        for label, times, ok in bench_matching(args.tasks, args.groups, 20 if args.quick else 50):
            print(f"{label:<52} {times}  {ok}")
        if args.matching_only:
            return
        for label, times, ok in [*bench_big(big, args.groups, 5), bench_store_size(sample, big)]:
            print(f"{label:<52} {times}  {ok}")

    result, pilots = bench_burst(burst_pilots, max(args.tasks, burst_pilots))
    print()
    print(
        f"Burst: {pilots} pilots register, request and complete at once over HTTP on loopback "
        f"({result['elapsed']:.1f} s, {3 * pilots / result['elapsed']:.0f} requests/s)"
    )
    print(f"{'call':<10} {'n':>6} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for op, raw in result["latencies"].items():
        values = sorted(raw)
        if not values:
            continue

        def q(f: float, v: list[float] = values) -> float:
            return v[min(len(v) - 1, int(f * len(v)))] * 1000

        cells = f"{q(0.5):>8.1f} {q(0.9):>8.1f} {q(0.99):>8.1f} {values[-1] * 1000:>8.1f}"
        print(f"{op:<10} {len(values):>6} {cells}")
    per_call = 1000 * result["cpu"] / (3 * pilots)
    print(
        f"burst {result['elapsed']:.1f} s (target < {BURST_TARGET_S:.0f} s with 1,500 pilots): "
        + (verdict(result["elapsed"] < BURST_TARGET_S) if pilots == 1500 else "- (not 1,500)")
    )
    print(
        f"TQ CPU {per_call:.2f} ms per call (target <= {CPU_TARGET_MS:.0f} ms): "
        + verdict(per_call <= CPU_TARGET_MS)
    )
    print(f"errors: {len(result['errors'])}")
    for line in result["errors"][:5]:
        print(f"  {line}")
    if result["errors"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
