"""Benchmark of the site DHT, with the PyPI `kademlia` package as the reference.

For each N it measures, on 127.0.0.1:
- ours: join time (wall and CPU), lookup hops and latency of gets after sets,
  broadcast-and-aggregate completion time, coverage and message count; then churn: 10% of the
  nodes SIGKILLed at once (no LEAVE), a broadcast right after (coverage of the live nodes within
  10 s), then a get of every key set.  The live nodes are split across ``--procs`` processes
  (default 1, as the reference), each running one event loop that hosts a slice of them; the
  nodes to be killed live in one more process of their own, which joins with the others.
- kademlia 2.2.3 (reference, same N, same run, one process): join time (wall and CPU), set/get
  success and latency, and gets after 10% of its servers stopped at once.  It has no broadcast.

What a join does on each side: kademlia's ``bootstrap`` pings the given address and looks up its
own id (a ``NodeSpiderCrawl``, ``k`` = 20, alpha = 3); its buckets are refreshed an hour later.
Ours pings the given addresses, looks up its own id (``k`` = 20, alpha = 3), then refreshes each
bucket beyond the ``k`` closest nodes found until it holds ``join_fill`` contacts (Kademlia section
2.3).  Every datagram of ours is sealed with the site key (HMAC-SHA256) and checked against the
replay window; kademlia's are plain.

Run: ``.venv/bin/python bench/dht_bench.py --sizes 100,500,1500`` or ``--quick`` (N = 100, about
a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing as mp
import os
import random
import signal
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
CHURN = 0.1
"""Fraction of the nodes SIGKILLed at once after the measurements with every node up."""
CHURN_BROADCAST_S = 10.0
"""The broadcast after the kill must reach every live node within this."""
GET_BATCH = 50
"""Gets in flight per process after the kill (each may wait out timeouts on dead contacts)."""


# --- ours: one worker process hosts a slice of the nodes ------------------------------------------


class Worker:
    """The nodes of one process, driven by commands from the parent over a pipe."""

    def __init__(self, index: int, seed: int) -> None:
        self.index = index
        self.rng = random.Random(seed * 1000 + index)
        self.nodes: list[DhtNode] = []

    async def start(self, count: int, bootstrap: tuple[str, int] | None) -> list[tuple[str, int]]:
        started = time.monotonic()
        cpu = time.process_time()
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
        self.join_cpu = time.process_time() - cpu
        return [n.address for n in self.nodes]

    async def put(self, keys: Sequence[str]) -> int:
        stored = 0
        for start in range(0, len(keys), GET_BATCH):
            batch = keys[start : start + GET_BATCH]
            done = await asyncio.gather(
                *(self.rng.choice(self.nodes).put(key, key.encode()) for key in batch)
            )
            stored += sum(count > 0 for count in done)
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

    async def get_many(self, keys: Sequence[str]) -> list[bool]:
        """Gets ``GET_BATCH`` at a time: whether each returned exactly its value."""

        async def one(key: str) -> bool:
            found = await self.rng.choice(self.nodes).get(key)
            return found == [key.encode()]

        out: list[bool] = []
        for start in range(0, len(keys), GET_BATCH):
            out += await asyncio.gather(*(one(key) for key in keys[start : start + GET_BATCH]))
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
        if command == "ready":
            conn.send(None)
        elif command == "start":
            conn.send(await worker.start(*args))
        elif command == "join_seconds":
            conn.send((worker.join_seconds, worker.join_cpu))
        elif command == "get_many":
            conn.send(await worker.get_many(*args))
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
        live = [i for i, proc in enumerate(self.procs) if proc.exitcode is None]
        for i in live:
            self.conns[i].send((command, per_worker[i] if per_worker else ()))
        return [self.conns[i].recv() for i in live]

    def kill(self, index: int) -> None:
        """SIGKILL one worker process: its nodes vanish without LEAVE (their sockets close)."""
        os.kill(self.procs[index].pid, signal.SIGKILL)
        self.procs[index].join()

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
    join_cpu_s: float
    gets_ok: float
    hops: float | None
    get_p50_ms: float
    get_p95_ms: float
    bcast_coverage: float | None = None
    bcast_msgs: int | None = None
    bcast_ms: list[float] = field(default_factory=list)
    killed: int = 0
    churn_gets_ok: float | None = None
    churn_gets: int = 0
    churn_bcast_coverage: float | None = None
    churn_bcast_s: float | None = None
    notes: str = ""


def bench_ours(
    n: int, procs: int, lookups: int, churn_keys: int, broadcasts: int, seed: int
) -> Row:
    procs = max(1, min(procs, n))
    killed = round(n * CHURN)
    alive = n - killed
    # The last process hosts the nodes to be killed; it joins beside the others.
    cluster = Cluster(procs + (1 if killed else 0), seed)
    try:
        sizes = [alive // procs + (1 if i < alive % procs else 0) for i in range(procs)]
        if killed:
            sizes.append(killed)
        cluster.ask_all("ready")  # the processes have imported everything: not part of the join
        started = time.monotonic()
        first = cluster.ask(0, "start", 1, None)
        rest = [(sizes[0] - 1, first[0])] + [(sizes[i], first[0]) for i in range(1, len(sizes))]
        cluster.ask_all("start", rest)
        join_s = time.monotonic() - started
        join_cpu = sum(cpu for _, cpu in cluster.ask_all("join_seconds"))

        keys = [f"/store/bench/{seed}/{i}" for i in range(max(lookups, churn_keys))]
        share = [(keys[i::procs],) for i in range(procs)]
        cluster.ask_all("put", [*share, ([],)] if killed else share)
        gets: list[tuple[bool, int, float]] = []
        for i in range(procs):  # one process at a time: latency without contention
            gets += cluster.ask(i, "get", keys[i:lookups:procs])
        latencies = sorted(g[2] * 1000 for g in gets)

        cluster.ask_all("register")
        times: list[float] = []
        coverage = 0.0
        msgs = 0
        for _ in range(broadcasts):
            coverage, msgs, elapsed = _broadcast(cluster, n, n, 10.0)
            times.append(elapsed * 1000)
        row = Row(
            "glidein_ext.dht",
            n,
            join_s,
            join_cpu,
            sum(g[0] for g in gets) / len(gets),
            statistics.fmean(g[1] for g in gets),
            _pct(latencies, 50),
            _pct(latencies, 95),
            coverage,
            msgs,
            times,
            notes=f"{procs} proc(s)",
        )
        if killed:
            cluster.kill(procs)
            row.killed = killed
            row.churn_bcast_coverage, _, row.churn_bcast_s = _broadcast(
                cluster, alive, n, CHURN_BROADCAST_S
            )
            ok = [hit for got in cluster.ask_all("get_many", share) for hit in got]
            row.churn_gets_ok = sum(ok) / len(ok)
            row.churn_gets = len(ok)
            row.notes += " + 1 with the killed"
        return row
    finally:
        cluster.close()


def _broadcast(cluster: Cluster, live: int, n: int, timeout: float) -> tuple[float, int, float]:
    """One broadcast from the first node: (coverage of the ``live`` nodes, forwards, seconds)."""
    cluster.ask_all("reset")
    value, complete, elapsed = cluster.ask(0, "broadcast", timeout)
    counters = cluster.ask_all("counters")
    once = sum(c["handled_once"] for c in counters)
    msgs = sum(c["forwarded"] for c in counters)
    if value != live or not complete:
        print(
            f"  broadcast at N={n} ({live} live): value {value}, complete {complete}",
            file=sys.stderr,
        )
    return once / live, msgs, elapsed


# --- the reference: PyPI kademlia 2.2.3, one process ----------------------------------------------


async def _kademlia(n: int, lookups: int, churn_keys: int, seed: int) -> Row:
    from kademlia.network import Server  # type: ignore[import-untyped]

    rng = random.Random(seed)
    # rpcudp 5.0.1 sets results on futures that timed out already, and the servers stopped for
    # the churn leave tasks that send on their closed sockets; count those, do not print.
    stray = 0
    loop = asyncio.get_running_loop()

    def quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        nonlocal stray
        if isinstance(context.get("exception"), (asyncio.InvalidStateError, AttributeError)):
            stray += 1
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(quiet)
    servers: list[Any] = []
    addresses: list[tuple[str, int]] = []
    try:
        started = time.monotonic()
        cpu = time.process_time()
        for _ in range(n):
            server = Server(ksize=20, alpha=3)
            await server.listen(0, "127.0.0.1")
            host, port = server.transport.get_extra_info("sockname")[:2]
            if addresses:
                await server.bootstrap([rng.choice(addresses)])
            servers.append(server)
            addresses.append((host, port))
        join_s = time.monotonic() - started
        join_cpu = time.process_time() - cpu
        keys = [f"/store/bench/{seed}/{i}" for i in range(max(lookups, churn_keys))]
        for start in range(0, len(keys), GET_BATCH):
            await asyncio.gather(
                *(rng.choice(servers).set(key, key) for key in keys[start : start + GET_BATCH])
            )
        ok = 0
        latencies = []
        for key in keys[:lookups]:
            server = rng.choice(servers)
            t0 = time.perf_counter()
            got = await server.get(key)
            latencies.append((time.perf_counter() - t0) * 1000)
            ok += got == key
        latencies.sort()
        row = Row(
            "kademlia 2.2.3",
            n,
            join_s,
            join_cpu,
            ok / lookups,
            None,
            _pct(latencies, 50),
            _pct(latencies, 95),
        )
        row.killed, hits = await _kademlia_churn(servers, keys, rng)
        row.churn_gets_ok = sum(hits) / len(hits)
        row.churn_gets = len(hits)
        row.notes = f"1 proc; {stray} stray rpcudp errors" if stray else "1 proc"
        return row
    finally:
        for server in servers:
            server.stop()
        # Its request tasks outlive stop(); end them here rather than at interpreter exit.
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


async def _kademlia_churn(
    servers: list[Any], keys: list[str], rng: random.Random
) -> tuple[int, list[bool]]:
    """Stop 10% of the servers at once (their sockets close, as at a SIGKILL), then get every
    key from the live ones; how many stopped, and whether each get returned its value."""
    victims = set(rng.sample(range(len(servers)), round(len(servers) * CHURN)))
    for index in victims:
        servers[index].stop()
    live = [server for i, server in enumerate(servers) if i not in victims]

    async def one(key: str) -> bool:
        return bool(await rng.choice(live).get(key) == key)

    hits: list[bool] = []
    for start in range(0, len(keys), 4 * GET_BATCH):
        hits += await asyncio.gather(*(one(key) for key in keys[start : start + 4 * GET_BATCH]))
    return len(victims), hits


def bench_kademlia(n: int, lookups: int, churn_keys: int, seed: int) -> Row:
    logging.getLogger("kademlia").setLevel(logging.CRITICAL)
    logging.getLogger("rpcudp").setLevel(logging.CRITICAL)
    return asyncio.run(_kademlia(n, lookups, churn_keys, seed))


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
        "| impl | N | join s | join CPU s | gets ok | hops | get p50 ms | get p95 ms "
        "| bcast coverage | bcast msgs | bcast ms (median, max) | killed | gets ok after "
        "| bcast coverage after | bcast s after | notes |"
    )
    print(header)
    print("|" + "---|" * 16)
    for r in rows:
        bcast = f"{statistics.median(r.bcast_ms):.0f}, {max(r.bcast_ms):.0f}" if r.bcast_ms else "-"
        print(
            f"| {r.impl} | {r.n} | {r.join_s:.1f} | {r.join_cpu_s:.1f} | {_pct_text(r.gets_ok)} "
            f"| {_fmt(r.hops, '.2f')} | {r.get_p50_ms:.1f} | {r.get_p95_ms:.1f} "
            f"| {_pct_text(r.bcast_coverage)} | {_fmt(r.bcast_msgs, 'd')} | {bcast} | {r.killed} "
            f"| {_pct_text(r.churn_gets_ok, 2)} of {r.churn_gets} "
            f"| {_pct_text(r.churn_bcast_coverage)} | {_fmt(r.churn_bcast_s, '.2f')} | {r.notes} |",
            flush=True,
        )


def _pct_text(fraction: float | None, digits: int = 1) -> str:
    return "-" if fraction is None else f"{100 * fraction:.{digits}f}%"


def verdicts(rows: list[Row]) -> list[str]:
    """One line per target and N: met or missed."""
    lines = []
    reference = {r.n: r for r in rows if r.impl.startswith("kademlia")}
    for r in rows:
        if not r.impl.startswith("glidein_ext"):
            continue
        ref = reference.get(r.n)
        if ref is not None:
            lines.append(
                _verdict(
                    r.join_s <= ref.join_s,
                    f"N={r.n}: join no slower than kademlia's "
                    f"({r.join_s:.1f} s against {ref.join_s:.1f} s; "
                    f"CPU {r.join_cpu_s:.1f} s against {ref.join_cpu_s:.1f} s)",
                )
            )
        lines.append(
            _verdict(
                r.gets_ok == 1.0 and r.get_p50_ms < 10.0,
                f"N={r.n}: every get succeeds, median latency under 10 ms "
                f"({_pct_text(r.gets_ok)}, p50 {r.get_p50_ms:.1f} ms, p95 {r.get_p95_ms:.1f} ms)",
            )
        )
        if r.churn_gets_ok is not None:
            lines.append(
                _verdict(
                    r.churn_gets_ok >= 0.999,
                    f"N={r.n}, {r.killed} SIGKILLed: gets >= 99.9% "
                    f"({_pct_text(r.churn_gets_ok, 2)} of {r.churn_gets})",
                )
            )
        if r.churn_bcast_coverage is not None and r.churn_bcast_s is not None:
            lines.append(
                _verdict(
                    r.churn_bcast_coverage == 1.0 and r.churn_bcast_s <= CHURN_BROADCAST_S,
                    f"N={r.n}, {r.killed} SIGKILLed: a broadcast reaches every live node within "
                    f"{CHURN_BROADCAST_S:.0f} s ({_pct_text(r.churn_bcast_coverage)} "
                    f"in {r.churn_bcast_s:.2f} s)",
                )
            )
    return lines


def _verdict(met: bool, text: str) -> str:
    return f"{'met   ' if met else 'MISSED'} {text}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="100,500,1500", help="comma-separated N values")
    parser.add_argument(
        "--procs", type=int, default=1, help="processes hosting our live nodes (kademlia: 1)"
    )
    parser.add_argument("--lookups", type=int, default=200, help="keys got one at a time per N")
    parser.add_argument(
        "--churn-keys", type=int, default=1000, help="keys set per N, all got after the kill"
    )
    parser.add_argument("--broadcasts", type=int, default=5, help="broadcasts per N")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-reference", action="store_true", help="skip the kademlia package")
    parser.add_argument("--quick", action="store_true", help="N=100 only, fewer keys")
    args = parser.parse_args(argv)
    sizes = [100] if args.quick else [int(s) for s in args.sizes.split(",") if s]
    lookups = 50 if args.quick else args.lookups
    churn_keys = 300 if args.quick else args.churn_keys
    broadcasts = 3 if args.quick else args.broadcasts
    rows = []
    for n in sizes:
        print(f"N={n}: ours ...", file=sys.stderr, flush=True)
        rows.append(bench_ours(n, args.procs, lookups, churn_keys, broadcasts, args.seed))
        if not args.no_reference:
            print(f"N={n}: kademlia ...", file=sys.stderr, flush=True)
            rows.append(bench_kademlia(n, lookups, churn_keys, args.seed))
    print_table(rows)
    print()
    for line in verdicts(rows):
        print(line)


if __name__ == "__main__":
    main()
