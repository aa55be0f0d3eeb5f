"""Worker-node data cache: peer fetch throughput against a plain file copy, and the cost of cache
insertion and lookup at 100k entries.

    .venv/bin/python bench/cache_bench.py [--quick] [--size-mb 256] [--entries 100000]

Peer fetch: a pilot's PeerServer on 127.0.0.1 serves a file from its cache; another pilot's
PeerClient fetches it into its own cache (HMAC auth, adler32 check, atomic rename).  The baseline
is a plain copy of the same file to the same filesystem in the same run (shutil.copyfile, which
uses the kernel's zero-copy path), and a copy that also computes adler32 (what any verified
transfer must do), and the ceiling of loopback TCP itself (sendfile to a receiver that only
receives).  Goal: peer fetch at least 80% of the plain copy on loopback.

Cache cost: the pure LruIndex (admit, touch) and the disk CacheStore (insert of a 1-byte file,
lookup) with N entries already cached; lookups are random hits.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import statistics
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from glidein_ext.cache.checksum import FileMeta, adler32_file
from glidein_ext.cache.lru import LruIndex
from glidein_ext.cache.peer import PeerClient, PeerServer
from glidein_ext.cache.store import CacheStore

MB = 1024 * 1024
KEY = b"bench-site-key-0123456789"
GOAL = 0.80


def _best_rate(runs: int, size: int, action: Callable[[int], None]) -> tuple[float, float]:
    """(median MB/s, best MB/s) over ``runs`` runs of ``action(run_number)``."""
    rates = []
    for run in range(runs):
        start = time.perf_counter()
        action(run)
        rates.append(size / MB / (time.perf_counter() - start))
    return statistics.median(rates), max(rates)


def bench_transfer(work: Path, size_mb: int, runs: int) -> list[tuple[str, float, float]]:
    data = os.urandom(size_mb * MB)
    serving = CacheStore(work / "peer", 4 * size_mb * MB, fsync=False)
    src = serving.insert_bytes("/store/bench/file.root", data)
    expected = FileMeta(len(data), zlib.adler32(data))
    del data
    size = expected.size
    rows: list[tuple[str, float, float]] = []

    def plain_copy(run: int) -> None:
        dest = work / f"copy{run}"
        shutil.copyfile(src, dest)
        dest.unlink()

    def checked_copy(run: int) -> None:
        dest = work / f"ccopy{run}"
        shutil.copyfile(src, dest)
        if adler32_file(dest) != expected.adler32:
            raise RuntimeError("copy corrupted")
        dest.unlink()

    rows.append(("plain file copy (shutil.copyfile)", *_best_rate(runs, size, plain_copy)))
    rows.append(("file copy + adler32 of the copy", *_best_rate(runs, size, checked_copy)))
    with PeerServer(serving, KEY) as server:
        client = PeerClient(KEY)

        def peer_fetch(run: int) -> None:
            mine = CacheStore(work / f"mine{run}", 4 * size, fsync=False)
            client.fetch(server.address, "/store/bench/file.root", mine, expected)
            mine.evict("/store/bench/file.root")

        peer_fetch(-1)  # warm the server's digest memo and the page cache
        rows.append(
            ("peer fetch (HTTP, auth, adler32, atomic)", *_best_rate(runs, size, peer_fetch))
        )
    rows.append(("loopback TCP ceiling: sendfile -> recv only", *_tcp_ceiling(src, size, runs)))
    return rows


def _tcp_ceiling(path: Path, size: int, runs: int) -> tuple[float, float]:
    """What loopback TCP alone carries here: the server sendfile()s, the client only receives
    (no write, no checksum).  No transfer over a socket can beat it."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        for _ in range(runs):
            conn, _ = listener.accept()
            with conn, open(path, "rb") as handle:
                conn.sendfile(handle)

    server = threading.Thread(target=serve, name="tcp-ceiling")
    server.start()
    buf = memoryview(bytearray(4 * MB))

    def receive(run: int) -> None:
        del run
        with socket.create_connection(listener.getsockname()) as conn:
            got = 0
            while n := conn.recv_into(buf):
                got += n
        if got != size:
            raise RuntimeError("short read")

    try:
        return _best_rate(runs, size, receive)
    finally:
        server.join()
        listener.close()


def _per_op_us(count: int, action: Callable[[int], object]) -> float:
    start = time.perf_counter()
    for i in range(count):
        action(i)
    return (time.perf_counter() - start) / count * 1e6


def bench_cache(work: Path, entries: int, ops: int) -> list[tuple[str, float]]:
    rng = random.Random(1)
    keys = [f"/store/bench/{i // 1000}/{i}.root" for i in range(entries)]
    rows: list[tuple[str, float]] = []

    index = LruIndex(entries * 10)
    rows.append(
        (
            f"LruIndex.admit, filling to {entries}",
            _per_op_us(entries, lambda i: index.admit(keys[i], 10)),
        )
    )
    hits = [keys[rng.randrange(entries)] for _ in range(ops)]
    rows.append(
        (f"LruIndex.touch (hit) at {entries}", _per_op_us(ops, lambda i: index.touch(hits[i])))
    )
    full = LruIndex(entries * 10)
    for key in keys:
        full.admit(key, 10)
    extra = [f"/store/extra/{i}" for i in range(ops)]
    rows.append(
        (
            f"LruIndex.admit with eviction at {entries}",
            _per_op_us(ops, lambda i: full.admit(extra[i], 10)),
        )
    )

    store = CacheStore(work / "store", entries + ops + 1, fsync=False)
    start = time.perf_counter()
    for key in keys:
        store.insert_bytes(key, b"x")
    rows.append(
        (
            f"CacheStore.insert (1-byte file), filling to {entries}",
            (time.perf_counter() - start) / entries * 1e6,
        )
    )
    rows.append(
        (f"CacheStore.lookup (hit) at {entries}", _per_op_us(ops, lambda i: store.lookup(hits[i])))
    )
    misses = [f"/store/miss/{i}" for i in range(ops)]
    rows.append(
        (
            f"CacheStore.lookup (miss) at {entries}",
            _per_op_us(ops, lambda i: store.lookup(misses[i])),
        )
    )
    start = time.perf_counter()
    CacheStore(work / "store", entries + ops + 1, fsync=False)
    rows.append(
        (
            f"CacheStore open (scan) of {entries} files, per file",
            (time.perf_counter() - start) / entries * 1e6,
        )
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, under a minute")
    parser.add_argument("--size-mb", type=int, default=None, help="file size for the transfer")
    parser.add_argument("--entries", type=int, default=100_000, help="cache entries")
    parser.add_argument("--runs", type=int, default=None, help="transfer repetitions")
    parser.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    args = parser.parse_args()
    size_mb = args.size_mb or (64 if args.quick else 256)
    runs = args.runs or (3 if args.quick else 5)
    entries = args.entries if not args.quick else min(args.entries, 100_000)
    ops = 20_000 if args.quick else 100_000
    with tempfile.TemporaryDirectory(prefix="cache-bench-", dir=args.dir) as tmp:
        work = Path(tmp)
        transfer = bench_transfer(work, size_mb, runs)
        cache = bench_cache(work, entries, ops)
    print(f"Peer fetch vs plain copy, {size_mb} MiB file, {runs} runs (MiB/s)")
    print(f"  {'what':<44} {'median':>9} {'best':>9}")
    for name, median, best in transfer:
        print(f"  {name:<44} {median:>9.0f} {best:>9.0f}")
    ratio = transfer[2][1] / transfer[0][1]
    verdict = "meets" if ratio >= GOAL else "misses"
    print(f"  peer / plain copy (median): {ratio:.0%} ({verdict} the {GOAL:.0%} goal)")
    print(f"  peer / copy + adler32 (median): {transfer[2][1] / transfer[1][1]:.0%}")
    print(
        f"  TCP ceiling / plain copy (median): {transfer[3][1] / transfer[0][1]:.0%}; "
        f"peer / TCP ceiling: {transfer[2][1] / transfer[3][1]:.0%}"
    )
    print()
    print(f"Cache cost at {entries} entries (microseconds per operation)")
    for name, micros in cache:
        print(f"  {name:<56} {micros:>9.2f}")


if __name__ == "__main__":
    main()
