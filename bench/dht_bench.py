"""Benchmark of the site DHT, with the PyPI `kademlia` package as the reference.

For each N it measures, on 127.0.0.1:
- ours: join time, lookup hops and latency of gets after sets, broadcast-and-aggregate completion
  time, coverage and message count.  The nodes are split across ``--procs`` processes, each
  running one event loop that hosts a slice of them (one loop is CPU-bound at 1,500 nodes).
- kademlia 2.2.3 (reference, same N, same run, one process): join time, set/get success and
  latency.  It has no broadcast.

Run: ``.venv/bin/python bench/dht_bench.py --sizes 100,500,1500`` or ``--quick`` (< 1 minute).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing as mp
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from glidein_ext.dht.ids import ID_BITS, key_id
from glidein_ext.dht.node import DhtNode
from glidein_ext.dht.settings import DhtSettings

SITE_KEY = b"benchmark-site-key-0123456789abcdef"
SETTINGS = DhtSettings(rpc_timeout=2.0)


# --- ours: one worker process hosts a slice of the nodes ------------------------------------------


class Worker:
    """The nodes of one process, driven by commands from the parent over a pipe."""

    def __init__(self, index: int, seed: int) -> None:
        self.index = index
        self.rng = random.Random(seed * 1000 + index)
        self.nodes: list[DhtNode] = []

    async def start(self, count: int, bootstrap: tuple[str, int] | None) -> list[tuple[str, int]]:
        started = time.monotonic()
        for _ in range(count):
            node = DhtNode(
                SITE_KEY, node_id=self.rng.getrandbits(ID_BITS), settings=SETTINGS, rng=self.rng
            )
            await node.start("127.0.0.1", 0, maintenance=False)
            contacts = [self.rng.choice(self.nodes).address] if self.nodes else []
            if bootstrap is not None and (not contacts or self.rng.random() < 0.1):
                contacts.append(bootstrap)
            if contacts:
                await node.join(contacts)
            self.nodes.append(node)
        self.join_seconds = time.monotonic() - started
        return [n.address for n in self.nodes]

    async def put(self, keys: Sequence[str]) -> int:
        stored = 0
        for key in keys:
            stored += await self.rng.choice(self.nodes).put(key, key.encode()) > 0
        return stored

    async def get(self, keys: Sequence[str]) -> list[tuple[bool, int, float]]:
        out = []
        for key in keys:
            node = self.rng.choice(self.nodes)
            started = time.perf_counter()
            found = await node.lookup(key_id(key), find_value=True)
            elapsed = time.perf_counter() - started
            out.append(([v.data for v in found.values] == [key.encode()], found.hops, elapsed))
        return out

    def register(self) -> None:
        for node in self.nodes:
            node.register_broadcast("count", lambda payload: 1, sum)

    def counters(self) -> dict[str, int]:
        handled = [n.stats.broadcasts_handled for n in self.nodes]
        return {
            "forwarded": sum(n.stats.broadcasts_forwarded for n in self.nodes),
            "handled": sum(handled),
            "handled_once": sum(1 for h in handled if h == 1),
            "duplicates": sum(n.stats.broadcast_duplicates for n in self.nodes),
            "datagrams": sum(n.stats.sent for n in self.nodes),
        }

    def reset(self) -> None:
        for node in self.nodes:
            node.stats.broadcasts_handled = 0
            node.stats.broadcasts_forwarded = 0
            node.stats.broadcast_duplicates = 0
            node.stats.sent = 0

    async def broadcast(self, timeout: float) -> tuple[Any, bool, float]:
        result = await self.nodes[0].broadcast("count", None, timeout=timeout)
        return result.value, result.complete, result.elapsed

    async def stop(self) -> None:
        for node in self.nodes:
            await node.close()


async def _serve(conn: Connection, index: int, seed: int) -> None:
    worker = Worker(index, seed)
    loop = asyncio.get_running_loop()
    while True:
        command, args = await loop.run_in_executor(None, conn.recv)
        if command == "start":
            conn.send(await worker.start(*args))
        elif command == "join_seconds":
            conn.send(worker.join_seconds)
        elif command == "put":
            conn.send(await worker.put(*args))
        elif command == "get":
            conn.send(await worker.get(*args))
        elif command == "register":
            worker.register()
            conn.send(None)
        elif command == "reset":
            worker.reset()
            conn.send(None)
        elif command == "counters":
            conn.send(worker.counters())
        elif command == "broadcast":
            conn.send(await worker.broadcast(*args))
        elif command == "stop":
            await worker.stop()
            conn.send(None)
            return


def _worker_main(conn: Connection, index: int, seed: int) -> None:
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(_serve(conn, index, seed))


class Cluster:
    """The parent's handle on the worker processes."""

    def __init__(self, procs: int, seed: int) -> None:
        ctx = mp.get_context("spawn")
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        for index in range(procs):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker_main, args=(child, index, seed), daemon=True)
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)

    def ask(self, index: int, command: str, *args: Any) -> Any:
        self.conns[index].send((command, args))
        return self.conns[index].recv()

    def ask_all(
        self, command: str, per_worker: Sequence[tuple[Any, ...]] | None = None
    ) -> list[Any]:
        for i, conn in enumerate(self.conns):
            conn.send((command, per_worker[i] if per_worker else ()))
        return [conn.recv() for conn in self.conns]

    def close(self) -> None:
        try:
            self.ask_all("stop")
        except (BrokenPipeError, EOFError):
            print("a worker process died; see its error above", file=sys.stderr)
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()


@dataclass
class Row:
    impl: str
    n: int
    join_s: float
    gets_ok: float
    hops: float | None
    get_p50_ms: float
    get_p95_ms: float
    bcast_coverage: float | None = None
    bcast_msgs: int | None = None
    bcast_ms: list[float] = field(default_factory=list)
    notes: str = ""


def bench_ours(n: int, procs: int, lookups: int, broadcasts: int, seed: int) -> Row:
    procs = max(1, min(procs, n))
    cluster = Cluster(procs, seed)
    try:
        sizes = [n // procs + (1 if i < n % procs else 0) for i in range(procs)]
        started = time.monotonic()
        first = cluster.ask(0, "start", 1, None)
        rest = [(sizes[0] - 1, first[0])] + [(sizes[i], first[0]) for i in range(1, procs)]
        cluster.ask_all("start", rest)
        join_s = time.monotonic() - started

        keys = [f"/store/bench/{seed}/{i}" for i in range(lookups)]
        cluster.ask(0, "put", keys)
        share = [keys[i::procs] for i in range(procs)]
        gets: list[tuple[bool, int, float]] = []
        for i in range(procs):  # one process at a time: latency without contention
            gets += cluster.ask(i, "get", share[i])
        latencies = sorted(g[2] * 1000 for g in gets)

        cluster.ask_all("register")
        times = []
        coverage = 0.0
        msgs = 0
        for _ in range(broadcasts):
            cluster.ask_all("reset")
            value, complete, elapsed = cluster.ask(0, "broadcast", 10.0)
            counters = cluster.ask_all("counters")
            once = sum(c["handled_once"] for c in counters)
            coverage = once / n
            msgs = sum(c["forwarded"] for c in counters)
            times.append(elapsed * 1000)
            if value != n or not complete:
                print(f"  broadcast at N={n}: value {value}, complete {complete}", file=sys.stderr)
        return Row(
            "glidein_ext.dht",
            n,
            join_s,
            sum(g[0] for g in gets) / len(gets),
            statistics.fmean(g[1] for g in gets),
            _pct(latencies, 50),
            _pct(latencies, 95),
            coverage,
            msgs,
            times,
            f"{procs} procs",
        )
    finally:
        cluster.close()


# --- the reference: PyPI kademlia 2.2.3, one process ----------------------------------------------


async def _kademlia(n: int, lookups: int, seed: int) -> Row:
    from kademlia.network import Server  # type: ignore[import-untyped]

    rng = random.Random(seed)
    # rpcudp 5.0.1 sets results on futures that timed out already; count those, do not print.
    stray = 0
    loop = asyncio.get_running_loop()

    def quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        nonlocal stray
        if isinstance(context.get("exception"), asyncio.InvalidStateError):
            stray += 1
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(quiet)
    servers: list[Any] = []
    addresses: list[tuple[str, int]] = []
    try:
        started = time.monotonic()
        for _ in range(n):
            server = Server(ksize=20, alpha=3)
            await server.listen(0, "127.0.0.1")
            host, port = server.transport.get_extra_info("sockname")[:2]
            if addresses:
                await server.bootstrap([rng.choice(addresses)])
            servers.append(server)
            addresses.append((host, port))
        join_s = time.monotonic() - started
        keys = [f"/store/bench/{seed}/{i}" for i in range(lookups)]
        for key in keys:
            await rng.choice(servers).set(key, key)
        ok = 0
        latencies = []
        for key in keys:
            server = rng.choice(servers)
            t0 = time.perf_counter()
            got = await server.get(key)
            latencies.append((time.perf_counter() - t0) * 1000)
            ok += got == key
        latencies.sort()
        return Row(
            "kademlia 2.2.3",
            n,
            join_s,
            ok / len(keys),
            None,
            _pct(latencies, 50),
            _pct(latencies, 95),
            notes=f"1 proc; {stray} rpcudp InvalidStateError" if stray else "1 proc",
        )
    finally:
        for server in servers:
            server.stop()
        # Its request tasks outlive stop(); end them here rather than at interpreter exit.
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


def bench_kademlia(n: int, lookups: int, seed: int) -> Row:
    logging.getLogger("kademlia").setLevel(logging.CRITICAL)
    logging.getLogger("rpcudp").setLevel(logging.CRITICAL)
    return asyncio.run(_kademlia(n, lookups, seed))


# --- output ---------------------------------------------------------------------------------------


def _pct(sorted_values: Sequence[float], pct: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, round(pct / 100 * (len(sorted_values) - 1)))
    return sorted_values[index]


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(rows: list[Row]) -> None:
    header = (
        "| impl | N | join s | gets ok | hops | get p50 ms | get p95 ms "
        "| bcast coverage | bcast msgs | bcast ms (median, max) | notes |"
    )
    print(header)
    print("|" + "---|" * 11)
    for r in rows:
        bcast = f"{statistics.median(r.bcast_ms):.0f}, {max(r.bcast_ms):.0f}" if r.bcast_ms else "-"
        coverage = "-" if r.bcast_coverage is None else f"{100 * r.bcast_coverage:.1f}%"
        print(
            f"| {r.impl} | {r.n} | {r.join_s:.1f} | {100 * r.gets_ok:.1f}% | {_fmt(r.hops, '.2f')} "
            f"| {r.get_p50_ms:.1f} | {r.get_p95_ms:.1f} | {coverage} "
            f"| {_fmt(r.bcast_msgs, 'd')} | {bcast} | {r.notes} |",
            flush=True,
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="100,500,1500", help="comma-separated N values")
    parser.add_argument("--procs", type=int, default=2, help="processes hosting our nodes")
    parser.add_argument("--lookups", type=int, default=200, help="keys set then got per N")
    parser.add_argument("--broadcasts", type=int, default=5, help="broadcasts per N")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-reference", action="store_true", help="skip the kademlia package")
    parser.add_argument("--quick", action="store_true", help="N=100 only, fewer lookups")
    args = parser.parse_args(argv)
    sizes = [100] if args.quick else [int(s) for s in args.sizes.split(",") if s]
    lookups = 50 if args.quick else args.lookups
    broadcasts = 3 if args.quick else args.broadcasts
    rows = []
    for n in sizes:
        print(f"N={n}: ours ...", file=sys.stderr, flush=True)
        rows.append(bench_ours(n, args.procs, lookups, broadcasts, args.seed))
        if not args.no_reference:
            print(f"N={n}: kademlia ...", file=sys.stderr, flush=True)
            rows.append(bench_kademlia(n, lookups, args.seed))
    print_table(rows)


if __name__ == "__main__":
    main()
