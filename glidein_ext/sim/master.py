"""A simulated distributed site (Delgado Peris 2014 §III.B-C): the master's rounds are the
product's own state machine (``distributed.master_state.MasterState``: the real
``sched.rounds.RoundBook``, TaskList fitting, rank matrix and assignment), fed with simulated
events; each idle worker ranks with its real ``sched.ranking.Ranker`` (its answer found by
``sim.ranks``, which scores only the entries that can make a worker's best ranks).

This module is the core's simulated shell, as ``distributed.master.MasterRole`` is its asyncio
one: it carries the core's instructions out with simulated costs and feeds back what came of
them.  The Task Queue calls go through the simulated server; the TaskList's broadcast and the
aggregated replies cross ``ceil(log_fanout(workers))`` levels of the DHT tree, each costing a
LAN message and (down) the decoding of the TaskList; the workers rank in parallel (the
calibrated cost of one ranking); the master's assignment costs the calibrated time per allowed
pair; a hand-out costs a LAN message.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from glidein_ext.distributed import machine
from glidein_ext.distributed import master_state as ms
from glidein_ext.sched.assign import assign
from glidein_ext.sched.ranking import InputFile, Ranker, TaskEntry, WorkerAd, WorkerState, task_spec
from glidein_ext.sched.tasklist import encode_reply
from glidein_ext.sim.context import Context
from glidein_ext.sim.pilots import dht_publish_time, execute
from glidein_ext.sim.ranks import RoundRanks
from glidein_ext.sim.taskqueue import Outcome
from glidein_ext.sim.workload import SimTask
from glidein_ext.tq.client.protocol import Refused, SitePilot

SIM_KEY = b"sim"  # the simulated workers' key: nothing is sealed in the simulator


@dataclass
class SimWorker:
    """A worker pilot: its ranker, what it runs, what it finished last."""

    pilot_id: int
    ranker: Ranker
    current: int = 0
    last_done: int = 0


def entry_of(task: SimTask, size: int) -> TaskEntry:
    spec = task_spec(task.spec, task.spec.attributes)
    return TaskEntry(task.task_id, spec, tuple(InputFile(lfn, size) for lfn in task.inputs))


def _ok(outcome: Outcome) -> bool:
    return outcome.ok


class SiteMaster:
    """One distributed site: its master and its workers."""

    def __init__(self, ctx: Context, site: int, master_id: int) -> None:
        self.ctx = ctx
        self.site = site
        self.master_id = master_id
        config = ctx.config
        size = config.file_size
        self.core: ms.MasterState[SimTask] = ms.MasterState(
            master_id,
            1,
            window=config.round_window,
            period=config.round_period,
            heartbeat=max(0.5, config.master_timeout / 3),
            now=ctx.env.now,
            entry=lambda task: entry_of(task, size),
            address=("sim", 0),
            long_poll=config.long_poll,
            full_fraction=config.round_full,
            round_stock=config.round_stock,
            batch_calls=config.master_calls == "batched",
            succeeded=_ok,
        )
        self.book = self.core.book
        self.workers: dict[int, SimWorker] = {}
        self._timer = 0  # the number of the timer armed last (an older one is void)
        self._stopped = False  # the workflow ended: the master makes no more calls
        # The instructions carried out by a simulated process of their own.
        self._processes: dict[type[Any], Callable[[Any], Generator[Any, Any, None]]] = {
            ms.CallSync: self._sync,
            ms.CallAssign: self._assign,
            ms.Broadcast: self._broadcast,
            ms.Solve: self._solve,
            ms.Deliver: self.run_task,
            machine.Probe: self._probe,
        }

    # --- events in, instructions out ---

    def _feed(self, event: ms.Event) -> None:
        if self._stopped:
            return
        for instruction in self.core.handle(event):
            self._carry(instruction)

    def _carry(self, instruction: ms.Instruction) -> None:
        env = self.ctx.env
        process = self._processes.get(type(instruction))
        if process is not None:
            env.process(process(instruction))
        elif isinstance(instruction, ms.ArmTimer):
            self._timer += 1
            env.process(self._tick(self._timer, instruction.at))
        # The log lines, the ends and resignations (no pilot leaves here): nothing to simulate.

    def _tick(self, number: int, at: float) -> Generator[Any, Any, None]:
        env = self.ctx.env
        yield env.timeout(max(0.0, at - env.now))
        if number == self._timer:
            self._feed(machine.Tick(env.now))

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
        hello = SitePilot(pilot_id, f"sim:{pilot_id}", key=SIM_KEY.hex())
        self._feed(ms.Installed(ctx.env.now, (hello,)))

    def run_task(self, ins: ms.Deliver[SimTask]) -> Generator[Any, Any, None]:
        ctx = self.ctx
        lan = ctx.config.network.lan_latency
        yield ctx.env.timeout(lan)  # the master's assign message
        task, pilot_id, attempt = ins.offer, ins.pilot_id, ins.attempt
        worker = self.workers[pilot_id]
        worker.current = task.task_id
        self._feed(ms.HandOutEnded(ctx.env.now, ins.handout, ms.HandOut.TAKEN))  # acknowledged
        outcome = yield from execute(ctx, pilot_id, task, attempt, True)
        yield ctx.env.timeout(dht_publish_time(ctx, len(task.outputs) + len(task.inputs)) + lan)
        worker.current, worker.last_done = 0, task.task_id
        self._feed(ms.LocalDone(ctx.env.now, pilot_id, outcome))

    def _probe(self, ins: machine.Probe) -> Generator[Any, Any, None]:
        yield self.ctx.env.timeout(2 * self.ctx.config.network.lan_latency)
        self._feed(machine.ProbeEnded(self.ctx.env.now, ins.pilot_id, ins.pilot_id in self.workers))

    # --- the master ---

    def run(self) -> Generator[Any, Any, None]:
        ctx = self.ctx
        env, tq = ctx.env, ctx.tq
        yield from tq.call(
            "register", tq.register(self.master_id, self.site, "master", works=False)
        )
        self._feed(ms.Started(env.now))
        yield tq.finished
        self._stopped = True

    def _sync(self, ins: ms.CallSync) -> Generator[Any, Any, None]:
        """A ``sync`` (a long poll when ``ins.wait``): the Task Queue's offers."""
        ctx = self.ctx
        tq = ctx.tq
        outcomes: list[tuple[int, Outcome]] = list(ins.report.completions)
        tq.release(ins.report.release)
        offers, runnable = yield from tq.long_sync(self.site, outcomes, ins.want, ins.wait)
        shared = tq.shared.get(self.site, frozenset()) if ins.want else frozenset()
        answer: ms.SyncAnswered[SimTask] = ms.SyncAnswered(
            ctx.env.now, ins.call, tuple(offers), runnable, shared, seen=ins.wait > 0
        )
        self._feed(answer)

    def _tree_depth(self) -> int:
        fanout = self.ctx.config.network.fanout
        return max(1, math.ceil(math.log(max(len(self.workers), 2), fanout)))

    def _broadcast(self, ins: ms.Broadcast) -> Generator[Any, Any, None]:
        """The TaskList down the tree, the workers' ranks, their replies up."""
        ctx = self.ctx
        shown = list(ins.entries)
        replies = self._replies(shown, ins.limit)
        network = ctx.config.network
        depth = self._tree_depth()
        down = depth * (network.lan_latency + network.decode_per_task * len(shown))
        elapsed = down + ctx.costs.rank_time(len(shown)) + depth * network.lan_latency
        yield ctx.env.timeout(elapsed)
        self._feed(ms.BroadcastEnded(ctx.env.now, replies, elapsed, True))

    def _replies(self, shown: list[TaskEntry], limit: int) -> list[Any]:
        """Each worker's reply to the TaskList: busy, or idle with its best ``limit`` ranks."""
        tasklist = RoundRanks(shown)
        replies: list[Any] = []
        for pilot_id, worker in self.workers.items():
            if worker.current or not shown:
                replies += encode_reply(pilot_id, worker.current, worker.last_done, None)
                continue
            state = WorkerState(cached=frozenset(self.ctx.caches.cached(pilot_id)))
            ranking = tasklist.rank(worker.ranker, state, limit, pilot_id)
            replies += encode_reply(pilot_id, 0, worker.last_done, ranking)
        return replies

    def _solve(self, ins: ms.Solve) -> Generator[Any, Any, None]:
        ctx = self.ctx
        result = assign(ins.matrix, ctx.config.assignment)
        yield ctx.env.timeout(ctx.costs.assign_time(ins.matrix.size))
        self._feed(ms.Solved(ctx.env.now, result))

    def _assign(self, ins: ms.CallAssign) -> Generator[Any, Any, None]:
        """The round's assign, with the completions it carries."""
        ctx = self.ctx
        pairs = [(pair.task_id, pair.pilot_id) for pair in ins.pairs]
        outcomes: list[tuple[int, Outcome]] = list(ins.completions)
        call = ctx.tq.assign(self.site, pairs, ins.report.rank_sum, ins.report.served, outcomes)
        placed = yield from ctx.tq.call("assign", call)
        accepted = tuple(
            ms.Accepted(task_id, pilot_id, attempt, tuple(after), more, tuple(needs))
            for task_id, pilot_id, attempt, after, more, needs in placed
        )
        taken = {item.task_id for item in accepted}
        refused = tuple(Refused(t, p, "not queued") for t, p in pairs if t not in taken)
        answer: ms.AssignAnswered[SimTask] = ms.AssignAnswered(
            ctx.env.now, ins.call, accepted, refused
        )
        self._feed(answer)
