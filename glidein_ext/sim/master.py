"""A simulated distributed site (Delgado Peris 2014 §III.B-C): the master's rounds over the real
``sched.rounds.RoundBook``, the real TaskList fitting (``sched.tasklist``), each idle worker's
real ``sched.ranking.Ranker``, the real rank matrix and assignment (``sched.assign``).

Time: the Task Queue calls go through the simulated server; the TaskList's broadcast and the
aggregated replies cross ``ceil(log_fanout(workers))`` levels of the DHT tree, each costing a
LAN message and (down) the decoding of the TaskList; the workers rank in parallel (the
calibrated cost of one ranking); the master's assignment costs the calibrated time per allowed
pair.  The master sequences its loop as ``distributed.master.MasterRole.run`` does.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, cast

from glidein_ext.dht import wire
from glidein_ext.distributed.master import REPLY_BUDGET, TASKLIST_BUDGET
from glidein_ext.sched.assign import assign
from glidein_ext.sched.matrix import RankMatrix, in_order, rank_sum
from glidein_ext.sched.ranking import InputFile, Ranker, TaskEntry, TaskSpec, WorkerAd, WorkerState
from glidein_ext.sched.roundrecords import Report
from glidein_ext.sched.rounds import RoundBook
from glidein_ext.sched.stock import OfferStock
from glidein_ext.sched.tasklist import (
    TaskList,
    decode_replies,
    encode_reply,
    encode_tasklist,
    fit_tasks,
    reply_limit,
)
from glidein_ext.sim.context import Context
from glidein_ext.sim.pilots import dht_publish_time, execute
from glidein_ext.sim.taskqueue import Outcome
from glidein_ext.sim.workload import SimTask


@dataclass
class SimWorker:
    """A worker pilot: its ranker, what it runs, what it finished last."""

    pilot_id: int
    ranker: Ranker
    current: int = 0
    last_done: int = 0


def entry_of(task: SimTask, size: int) -> TaskEntry:
    spec = task.spec
    return TaskEntry(
        task.task_id,
        TaskSpec(
            spec.requirements,
            spec.rank,
            spec.request_cpus,
            spec.request_memory,
            spec.request_disk,
            float(spec.max_runtime),
            spec.attributes,
        ),
        tuple(InputFile(lfn, size) for lfn in task.inputs),
    )


class SiteMaster:
    """One distributed site: its master and its workers."""

    def __init__(self, ctx: Context, site: int, master_id: int) -> None:
        self.ctx = ctx
        self.site = site
        self.master_id = master_id
        config = ctx.config
        self.book = RoundBook(
            master_id,
            window=config.round_window,
            period=config.round_period,
            heartbeat=max(0.5, config.master_timeout / 3),
            full_fraction=config.round_full,
            long_poll=config.long_poll,
            now=ctx.env.now,
        )
        self.stock: OfferStock[SimTask] = OfferStock(spare=self.book.heartbeat)
        self.workers: dict[int, SimWorker] = {}
        self._wake = ctx.env.event()
        self._more = False  # the last sync left runnable tasks unasked for

    def _poke(self) -> None:
        if not self._wake.triggered:
            self._wake.succeed()

    # --- the workers ---

    def worker(self, index: int, pilot_id: int) -> Generator[Any, Any, None]:
        """A worker registers, says hello, and then only runs what the master assigns."""
        ctx = self.ctx
        site, host = self.site, ctx.host_of(index)
        ctx.caches.join(pilot_id, site, host)
        yield from ctx.tq.call("register", ctx.tq.register(pilot_id, site, host))
        ad = WorkerAd({"Site": f"S{site}", "Host": host, "SE": f"se{site}"})
        self.workers[pilot_id] = SimWorker(pilot_id, Ranker(ad))
        yield ctx.env.timeout(ctx.config.network.lan_latency)
        self.book.join(pilot_id, ("sim", pilot_id), ctx.env.now)
        self._poke()

    def run_task(self, pilot_id: int, task: SimTask, attempt: int) -> Generator[Any, Any, None]:
        ctx = self.ctx
        lan = ctx.config.network.lan_latency
        yield ctx.env.timeout(lan)  # the master's assign message
        worker = self.workers[pilot_id]
        worker.current = task.task_id
        self.book.delivered(pilot_id)  # acknowledged, as ``distributed.delivery`` tells the book
        outcome = yield from execute(ctx, pilot_id, task, attempt, True)
        yield ctx.env.timeout(dht_publish_time(ctx, len(task.outputs) + len(task.inputs)) + lan)
        worker.current, worker.last_done = 0, task.task_id
        finished = {key[0] for key, _, _ in self.book.pending()}
        quiet = outcome.ok and self.stock.quiet(task.task_id, pilot_id, finished)
        key = (task.task_id, attempt)
        new = self.book.completed(pilot_id, key, outcome, ctx.env.now, quiet)
        if new and not self.book.deferred(key):
            self._poke()

    # --- the master ---

    def run(self) -> Generator[Any, Any, None]:
        ctx = self.ctx
        env, tq = ctx.env, ctx.tq
        yield from tq.call(
            "register", tq.register(self.master_id, self.site, "master", works=False)
        )
        while not tq.finished.triggered:
            now = env.now
            if self.book.round_due(now):
                yield from self._round(now)
            elif self.book.call_due(now) and not self._round_coming(now):
                yield from self._sync(self.book.take_report(now), 0)
            else:
                if self._wake.triggered:
                    self._wake = env.event()
                wait = max(self.book.next_wakeup(now), 0.01)
                yield env.any_of([env.timeout(wait), self._wake])

    def _round_coming(self, now: float) -> bool:
        """``batched``: a round due within one window carries the completions."""
        config = self.ctx.config
        return config.master_calls == "batched" and (
            self.book.next_wakeup(now) <= config.round_window
        )

    def _sync(
        self, report: Report, want: int, wait: float = 0.0
    ) -> Generator[Any, Any, list[SimTask] | None]:
        """The offers; None for a long poll given up for an event (``distributed.master``)."""
        tq = self.ctx.tq
        outcomes: list[tuple[int, Outcome]] = list(report.completions)
        for _, outcome in outcomes:
            self.stock.forget(outcome.task_id)
        for task_id in report.release:
            self.stock.forget(task_id)
        tq.release(report.release)
        if wait:  # a long poll, abandoned when an event wakes the master meanwhile
            if self._wake.triggered:
                self._wake = self.ctx.env.event()
            poll = self.ctx.env.process(tq.long_sync(self.site, outcomes, want, wait))
            yield self.ctx.env.any_of([poll, self._wake])
            if not poll.triggered:
                self.book.unreported(report)
                return None
            offers, runnable = cast("tuple[list[SimTask], int]", poll.value)
        else:
            offers, runnable = yield from tq.long_sync(self.site, outcomes, want, 0.0)
        self.book.reported(self.ctx.env.now if wait else None)  # a poll's answer: a call
        self.book.supply(runnable, wait > 0)
        self.stock.round_ended(self.ctx.env.now)  # the Task Queue has the completions
        # More runnable than asked for: another round if a worker is left idle
        # (``distributed.master``)
        self._more = runnable > len(offers)
        if self._more and not want and self.book.idle():
            self.book.trigger(self.ctx.env.now)
        return list(offers)

    def _tree_depth(self) -> int:
        fanout = self.ctx.config.network.fanout
        return max(1, math.ceil(math.log(max(len(self.workers), 2), fanout)))

    def _round(self, now: float) -> Generator[Any, Any, None]:
        ctx, book = self.ctx, self.book
        want = book.start_round(now)
        offers: list[SimTask] = []
        direct = self._direct_pairs(want)
        if direct is not None:  # no sync, no TaskList (``sched.stock``, as ``distributed.master``)
            pairs = [(task.task_id, pilot) for task, pilot in direct]
            yield from self._place(pairs, 0.0, 0, book.take_completions(now))  # it ranks nothing
            book.leftover(self.stock.round_ended(ctx.env.now), ctx.env.now)
            return
        done: Report | None = None  # the completions a round without a sync carries
        spares = self._spare_offers(want, now)
        if spares is not None:  # no sync: the last one's offers (``sched.stock``)
            offers, done = spares, book.take_completions(now)
        elif want or book.call_due(now):
            wait = book.poll_wait() if ctx.config.long_poll and want else 0.0
            got = yield from self._sync(book.take_report(now), want, wait)
            if got is None:
                return
            offers = got
            if want:  # those another site gets first are not kept (``Offers.shared``)
                shared = ctx.tq.shared.get(self.site, frozenset())
                self.stock.offered([t for t in offers if t.task_id not in shared], ctx.env.now)
        # The idle makers of successors get theirs; the others rank the rest (``sched.stock``).
        own = self.stock.mine(book.idle()) if ctx.config.round_stock else []
        offers = self.stock.others(offers, book.idle())
        entries = [entry_of(task, ctx.config.file_size) for task in offers]
        idle = len(book.idle())
        limit = reply_limit(idle, REPLY_BUDGET)

        def build(chosen: Any) -> Any:
            return encode_tasklist(
                TaskList(
                    book.round,
                    1,
                    self.master_id,
                    ("sim", 0),
                    book.successors(),
                    limit,
                    tuple(chosen),
                )
            )

        _, fitted = fit_tasks(entries, build, lambda p: len(wire.encode(p)), TASKLIST_BUDGET)
        if fitted < len(entries):
            book.trigger(ctx.env.now)
        shown = entries[:fitted]
        replies = self._replies(shown, limit)
        network = ctx.config.network
        depth = self._tree_depth()
        down = depth * (network.lan_latency + network.decode_per_task * len(shown))
        yield ctx.env.timeout(down + ctx.costs.rank_time(len(shown)) + depth * network.lan_latency)
        candidates = book.replies(decode_replies(replies, fitted))
        candidates = candidates.without({pilot for _, pilot in own})
        if own or (shown and candidates.pilots):
            yield from self._assign(offers[:fitted], candidates, done, own)
        elif done is not None:  # the spares fit none of the idle workers: the next round syncs
            self.stock.refused()
            book.unreported(done)
        if self._more and book.idle():
            book.trigger(ctx.env.now)

    def _replies(self, shown: list[TaskEntry], limit: int) -> list[Any]:
        """Each worker's reply to the TaskList: busy, or idle with its best ``limit`` ranks."""
        positions = [TaskEntry(i, e.spec, e.inputs) for i, e in enumerate(shown)]
        replies: list[Any] = []
        for pilot_id, worker in self.workers.items():
            if worker.current or not shown:
                replies += encode_reply(pilot_id, worker.current, worker.last_done, None)
                continue
            state = WorkerState(cached=frozenset(self.ctx.caches.cached(pilot_id)))
            ranking = worker.ranker.rank(positions, state, limit=limit, spread=pilot_id)
            replies += encode_reply(pilot_id, 0, worker.last_done, ranking)
        return replies

    def _direct_pairs(self, want: int) -> list[tuple[SimTask, int]] | None:
        """This round's pairs when it needs neither a sync nor a TaskList, as ``distributed.master``
        decides (``OfferStock.direct``); None otherwise."""
        book = self.book
        if not self.ctx.config.round_stock:
            return None
        for (task_id, _), pilot, outcome in book.pending():
            self.stock.completed(task_id, outcome.ok, pilot)
        if not want or book.news:
            return None
        return self.stock.direct(book.idle(), book.dry and self.ctx.config.long_poll)

    def _spare_offers(self, want: int, now: float) -> list[SimTask] | None:
        """The TaskList of a round without a sync (``OfferStock.spares``, as
        ``distributed.master``);
        None when the round syncs."""
        if not self.ctx.config.round_stock or not want or self.book.news:
            return None
        return self.stock.spares(self.book.idle(), now)

    def _assign(
        self,
        offered: list[SimTask],
        candidates: Any,
        done: Report | None,
        own: list[tuple[SimTask, int]],
    ) -> Generator[Any, Any, None]:
        """The own successors' pairs, and the ranked ones (``distributed.master``)."""
        ctx = self.ctx
        pairs = [(task.task_id, pilot) for task, pilot in own]
        total, served = 0.0, 0
        if offered and candidates.pilots:
            matrix = RankMatrix.from_replies(
                list(range(len(offered))), in_order(candidates.ranks), candidates.truncated
            )
            result = assign(matrix, ctx.config.assignment)
            yield ctx.env.timeout(ctx.costs.assign_time(matrix.size))
            pairs += [(offered[row].task_id, candidates.pilots[col]) for row, col in result.pairs]
            total, served = rank_sum(result.pairs, candidates.ranks), result.served
        yield from self._place(pairs, total, served, done)

    def _place(
        self, pairs: list[tuple[int, int]], rank_sum: float, served: int, done: Report | None
    ) -> Generator[Any, Any, None]:
        """The round's assign (with the completions it carries), then the hand-outs."""
        ctx, book = self.ctx, self.book
        outcomes: list[tuple[int, Outcome]] = list(done.completions) if done else []
        called = ctx.env.now
        call = ctx.tq.assign(self.site, pairs, rank_sum, served, outcomes)
        placed = yield from ctx.tq.call("assign", call)
        if done is not None:
            book.reported(called)
        for task_id, _, _, successors, more, needs in placed:
            self.stock.placed(task_id, successors, more, needs)
        if len(placed) < len(pairs):  # another site took a task: no spare any more
            taken = {task_id for task_id, *_ in placed}
            self.stock.refused([task_id for task_id, _ in pairs if task_id not in taken])
        # On their way (``distributed.delivery``): an idle reply meanwhile does not mean a task
        # is lost.
        placed_now = [(task_id, pilot_id, attempt) for task_id, pilot_id, attempt, *_ in placed]
        book.assigned(placed_now, delivering=True)
        book.took(len(placed), ctx.env.now)
        for task_id, pilot_id, attempt, *_ in placed:
            ctx.env.process(self.run_task(pilot_id, ctx.tq.tasks[task_id], attempt))
