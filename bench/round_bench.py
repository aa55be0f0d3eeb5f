"""A full round of the distributed architecture (Delgado Peris 2014 §III.B-C) on real DHT nodes: the
master broadcasts the TaskList, every worker filters and ranks it (``sched.ranking``) and answers
through the aggregation tree, the master builds the rank matrix and assigns (optimal and greedy).

    .venv/bin/python bench/round_bench.py [--quick] [--sizes 200,1500] [--rounds 3]

The nodes run in one process and one event loop on 127.0.0.1 (the round's messages are real UDP
datagrams, HMAC'd and encoded as in production).  The site: tasks in 8 groups with ClassAd
Requirements and Ranks that need classad2, each reading one step-0 output; every worker caches
the outputs of 2 earlier tasks and may run about 80% of the groups.  The TaskList holds as many
tasks as fit one datagram (about 1.3 per pilot at 1,500); each worker sends its best ``limit``
ranks (as many as the aggregate can carry).  Columns: building the TaskList to fit a datagram, one
worker decoding and ranking it, the broadcast and aggregation (root's view), the replies decoded
and the matrix built, each method's assignment; the median of the rounds.  In one process the
workers' ranking and every hop's decoding are serialized, so the broadcast column is the sum over
the site's nodes, not a site's latency (about depth x per-hop cost, log8 N levels).  ``--quick``:
200 pilots, 2 rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Sequence
from typing import Any

from glidein_ext.dht import wire
from glidein_ext.dht.node import DhtNode
from glidein_ext.dht.settings import DhtSettings
from glidein_ext.distributed.master_state import REPLY_BUDGET, TASKLIST_BUDGET
from glidein_ext.sched import ranking, tasklist
from glidein_ext.sched.assign import assign
from glidein_ext.sched.matrix import RankMatrix

GROUPS = 8
TOPIC = "tasklist"


def specs() -> list[ranking.TaskSpec]:
    return [
        ranking.TaskSpec(
            requirements=f"TARGET.Kind =!= {g % 5} && TARGET.Memory >= {500 * (g % 3)}",
            rank=f"TARGET.Memory / 1000.0 + {g}",
            max_runtime=3600.0,
            attributes=(("Group", g),),
        )
        for g in range(GROUPS)
    ]


def lfn(i: int) -> str:
    return f"/s/f{i:05d}"


class Worker:
    """One worker's answer to a TaskList, as ``distributed.worker`` gives it.

    In one process the workers' work is serialized (on a site it runs on every worker at once):
    :meth:`prepare` does it before the broadcast, timed, and the broadcast's handler returns the
    prepared reply, so the broadcast's time is the protocol's own (forwarding, aggregation).
    """

    def __init__(self, pilot_id: int, cached: frozenset[str], rng: random.Random) -> None:
        self.pilot_id = pilot_id
        attributes = {"Kind": rng.randrange(6)}
        self.ranker = ranking.Ranker(
            ranking.WorkerAd(attributes, 1, rng.choice((1000, 2000)), 10_000)
        )
        self.state = ranking.WorkerState(remaining=7200.0, cached=cached)
        self.reply: Any = None

    def prepare(self, payload: Any) -> float:
        """Decode and rank the TaskList (what a worker does on receiving it); the seconds spent."""
        started = time.perf_counter()
        shown = tasklist.decode_tasklist(wire.decode(wire.encode(payload)))
        entries = [ranking.TaskEntry(i, e.spec, e.inputs) for i, e in enumerate(shown.tasks)]
        ranks = self.ranker.rank(entries, self.state, shown.limit, spread=self.pilot_id)
        self.reply = tasklist.encode_reply(self.pilot_id, 0, 0, ranks)
        return time.perf_counter() - started

    def answer(self, payload: Any) -> Any:
        return self.reply


async def one_round(
    master: DhtNode, entries: list[ranking.TaskEntry], workers: list[Worker]
) -> dict[str, float]:
    started = time.perf_counter()

    def build(chosen: Sequence[ranking.TaskEntry]) -> Any:
        limit = tasklist.reply_limit(len(workers), REPLY_BUDGET)
        return tasklist.encode_tasklist(
            tasklist.TaskList(1, 1, 0, master.address, (), limit, tuple(chosen))
        )

    payload, fitted = tasklist.fit_tasks(
        entries, build, lambda p: len(wire.encode(p)), TASKLIST_BUDGET
    )
    fit = time.perf_counter() - started
    rank_s = statistics.median(worker.prepare(payload) for worker in workers)
    sent = time.perf_counter()
    result = await master.broadcast(TOPIC, payload, timeout=300.0)
    aggregated = time.perf_counter()
    replies = tasklist.decode_replies(result.value, fitted)
    matrix = RankMatrix.from_replies(
        list(range(fitted)),
        [r.ranks for r in replies],
        [j for j, r in enumerate(replies) if r.truncated],
    )
    built = time.perf_counter()
    best = assign(matrix, "optimal")
    solved = time.perf_counter()
    seed = assign(matrix, "greedy")
    greedy_done = time.perf_counter()
    return {
        "tasks": fitted,
        "replies": len(replies),
        "limit": tasklist.decode_tasklist(payload).limit,
        "fit_s": fit,
        "rank_s": rank_s,
        "broadcast_s": aggregated - sent,
        "matrix_s": built - aggregated,
        "optimal_s": solved - built,
        "greedy_s": greedy_done - solved,
        "optimal_sum": best.total,
        "optimal_served": best.served,
        "greedy_sum": seed.total,
        "greedy_served": seed.served,
    }


async def bench(pilots: int, rounds: int, seed: int) -> dict[str, float]:
    from glidein_ext.testbed.dht_testnet import start_nodes, stop_nodes

    rng = random.Random(seed)
    # Every node's work is serialized in this one process: a forward's acknowledgement may take
    # a while, which a site (nodes in parallel) never sees; a long RPC timeout keeps it from
    # being taken for a death.
    settings = DhtSettings(rpc_timeout=max(1.0, pilots / 25))
    nodes = await start_nodes(pilots + 1, seed=seed, settings=settings)
    try:
        groups = specs()
        n_tasks = 2 * pilots
        entries = [
            ranking.TaskEntry(i, groups[i % GROUPS], (ranking.InputFile(lfn(i), 10**8),))
            for i in range(n_tasks)
        ]
        nodes[0].register_broadcast(TOPIC, lambda payload: None, tasklist.combine)  # the master
        workers = []
        for index, node in enumerate(nodes[1:]):
            held = frozenset(lfn(rng.randrange(n_tasks)) for _ in range(2))
            worker = Worker(index + 1, held, rng)
            workers.append(worker)
            node.register_broadcast(TOPIC, worker.answer, tasklist.combine)
        results = [await one_round(nodes[0], entries, workers) for _ in range(rounds)]
    finally:
        await stop_nodes(nodes)
    return {key: statistics.median(r[key] for r in results) for key in results[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 pilots, 2 rounds")
    parser.add_argument("--sizes", default="200,1500", help="pilots per site, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    sizes = [200] if args.quick else [int(s) for s in args.sizes.split(",")]
    rounds = 2 if args.quick else args.rounds
    print(f"A full round on real DHT nodes in one process (median of {rounds} rounds)")
    print(
        f"{'pilots':>6} {'tasks':>5} {'replies':>7} {'limit':>5} {'fit ms':>6} {'rank ms':>7} "
        f"{'bcast ms':>8} {'matrix ms':>9} {'optimal ms':>10} {'greedy ms':>9} "
        f"{'opt sum':>8} {'opt served':>10} {'greedy sum':>10} {'greedy served':>13}"
    )
    for pilots in sizes:
        joined = time.perf_counter()
        r = asyncio.run(bench(pilots, rounds, args.seed))
        print(
            f"{pilots:>6} {int(r['tasks']):>5} {int(r['replies']):>7} {int(r['limit']):>5} "
            f"{1000 * r['fit_s']:>6.1f} {1000 * r['rank_s']:>7.1f} "
            f"{1000 * r['broadcast_s']:>8.1f} {1000 * r['matrix_s']:>9.1f} "
            f"{1000 * r['optimal_s']:>10.1f} {1000 * r['greedy_s']:>9.1f} "
            f"{r['optimal_sum']:>8.1f} {int(r['optimal_served']):>10} "
            f"{r['greedy_sum']:>10.1f} {int(r['greedy_served']):>13}"
        )
        took = time.perf_counter() - joined
        print(f"       (a site of {pilots} nodes set up and run in {took:.0f} s)")
    print(
        "rank ms: one worker decoding and ranking the TaskList (median; on a site every worker "
        "does it at once); bcast ms: the broadcast and aggregation, every node in this one "
        "process (each hop's decoding serialized)"
    )


if __name__ == "__main__":
    main()
