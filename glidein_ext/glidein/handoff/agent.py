"""The pilot agent of a glidein (``glidein-ext wrapper --tq``): beside condor_master, its startd
pulls the agent's Task Queue tasks through HTCondor's fetch-work hooks.

Hasham 2011 §IV has a pilot run one task at a time; a glidein with C CPUs runs up to C tasks at once
in its partitionable slot, so its agent runs ``lanes`` pilots (C by default), each a full
:class:`~glidein_ext.agent.agent.PilotAgent` with its own registration, cache (shared with the
others on the host by hard link, Hasham 2011 §IV-D) and, with a site DHT, its own node (Delgado
Peris 2014
III.A), all on one event loop as in ``agent.swarm``.  Their executor is the glidein's startd
(``handoff.executor``): a lane asks the Task Queue (or, distributed, answers its master's
TaskList) only when the startd has room, and its task runs as an HTCondor job of the glidein.
The hooks reach the agent through ``handoff.server``.

Draining (Sfiligoi 2013): when the glidein retires (its ``.site.ad``, MJF, or its own retire time --
``retiring()``), the board closes: no lane asks for more, the hook prints no more tasks, tasks not
yet handed to the startd go back to the Task Queue, and each lane leaves (the DHT, then the Task
Queue) as soon as its running task has ended and been reported.  The glidein's startd then leaves
by itself (DAEMON_SHUTDOWN) and the wrapper ends.  :meth:`GlideinAgent.stop` is the hard way
(SIGTERM): every lane leaves now, giving back what it holds.

What vacating the glidein would cost (``CACHED_INPUT_NEEDED_MB`` in its `.pilot.ad`, the site's
``cache`` victim policy): each lane learns which of its cached files tasks still to run read (the
Task Queue's heartbeat answer, or the TaskList it hears: ``PilotAgent.needed``); the lanes' caches
are one disk, so the watcher sums the union of their words and writes one value per glidein to
``START_DIR/.glidein-ext/cache-need.ad`` (``glidein.cacheneed``: at most every 30 s, when it
changed or to keep it fresh), which every `.pilot.ad` refresh copies.

Python 3.9, standard library only.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from glidein_ext.agent.agent import AgentConfig, PilotAgent
from glidein_ext.agent.loopthread import LoopThread
from glidein_ext.errors import AdFileError, GlideinExtError
from glidein_ext.escape import shown
from glidein_ext.glidein.cacheneed import PUBLISH_EVERY, CacheNeedPublisher
from glidein_ext.glidein.handoff.board import Board
from glidein_ext.glidein.handoff.executor import GlideinIdentity, StartdExecutor
from glidein_ext.glidein.handoff.server import HookServer

log = logging.getLogger("glidein_ext.agent.glidein")


@dataclass(frozen=True)
class GlideinAgentConfig:
    """How a glidein's agent runs: the lanes' common pilot settings and the glidein's own."""

    agent: AgentConfig  # workdir: the lanes' parent directory (lane-<i>/ each)
    start_dir: str
    lanes: int
    identity: GlideinIdentity
    fetch_wait: float = 2.0  # seconds a fetch waits for a lane to get a task
    retire_check: float = 2.0  # seconds between looks at the glidein's drain order
    need_every: float = PUBLISH_EVERY  # seconds: cache-need.ad is written at most this often


class _Lane(PilotAgent):
    """One of the glidein's pilots: a PilotAgent whose tasks go to the startd."""

    def __init__(
        self,
        config: AgentConfig,
        stop: threading.Event,
        loop: LoopThread,
        executor: Callable[[PilotAgent], StartdExecutor],
    ) -> None:
        super().__init__(config, stop, loop=loop)
        self._executor = executor(self)


class GlideinAgent:
    """``start()``, then ``wait()``; ``retire()`` drains, ``stop()`` leaves now; ``close()``."""

    def __init__(
        self,
        config: GlideinAgentConfig,
        retiring: Callable[[], bool],
        board: Board | None = None,
    ) -> None:
        self.config = config
        self.retiring = retiring
        self.board = board or Board(fetch_wait=config.fetch_wait)
        self.stops = [threading.Event() for _ in range(config.lanes)]
        self.ran = [0] * config.lanes
        self.failed = 0
        self._threads: list[threading.Thread] = []
        self._done = threading.Event()
        self._server: HookServer | None = None
        self._loop: LoopThread | None = None
        self._watcher: threading.Thread | None = None
        self.lanes: list[PilotAgent] = []
        self.need = CacheNeedPublisher(config.start_dir, every=config.need_every)

    def start(self) -> GlideinAgent:
        """Make the lanes, listen for the hooks, then start the lanes (they register meanwhile).
        A lane that cannot be made (a CA file that is no CA) raises before the hooks' socket
        exists, with nothing left running."""
        c = self.config
        self._loop = LoopThread("glidein-agent-loop").start()
        try:
            self.lanes = [self._make_lane(lane) for lane in range(c.lanes)]
        except BaseException:
            self.close()
            raise
        self._server = HookServer(c.start_dir, self.board).start()
        for lane, agent in enumerate(self.lanes):
            thread = threading.Thread(
                target=self._run_lane, args=(lane, agent), name=f"glidein-lane-{lane}"
            )
            thread.start()
            self._threads.append(thread)
        self._watcher = threading.Thread(target=self._watch, name="glidein-retire-watch")
        self._watcher.start()
        log.info(
            "glidein agent: %d lane(s) for %s at %s; hooks at %s",
            c.lanes,
            c.agent.site,
            c.agent.url,
            self._server.path,
        )
        return self

    def _make_lane(self, lane: int) -> PilotAgent:
        c = self.config
        assert self._loop is not None
        config = dataclasses.replace(c.agent, workdir=c.agent.workdir / f"lane-{lane}")

        def executor(agent: PilotAgent) -> StartdExecutor:
            return StartdExecutor(
                self.board, lane, agent.config.workdir, agent.open_cache(), c.identity
            )

        return _Lane(config, self.stops[lane], self._loop, executor)

    def _run_lane(self, lane: int, agent: PilotAgent) -> None:
        try:
            self.ran[lane] = agent.run()
            log.info("glidein agent: lane %d left after %d task(s)", lane, self.ran[lane])
        except GlideinExtError as exc:  # a reason (an untrusted server, a refused credential)
            self.failed += 1
            log.error("glidein agent: lane %d failed: %s", lane, shown(exc))
        except Exception:  # one lane's failure never ends the others (logged)
            self.failed += 1
            log.exception("glidein agent: lane %d failed; its tasks go back to the TQ", lane)

    def _watch(self) -> None:
        """Close the board once the glidein retires (Sfiligoi 2013: no new job starts); tell the
        refresh what the lanes' caches are needed for."""
        while not self._done.wait(self.config.retire_check):
            self.publish_need(time.time())
            if self.board.closed:
                return
            try:
                retiring = self.retiring()
            except Exception:  # the watch survives a failing look (logged)
                log.exception("glidein agent: cannot tell whether the glidein retires")
                continue
            if retiring:
                self.retire()

    def publish_need(self, now: float) -> int | None:
        """Write the glidein's CACHED_INPUT_NEEDED_MB if due (``CacheNeedPublisher``); the value
        written, or None.  A failure is logged (the refresh then finds it unknown): it never
        stops the watcher, which drains the glidein."""
        try:
            return self.need.publish([lane.needed.latest() for lane in self.lanes], now)
        except AdFileError as exc:
            log.warning("glidein agent: cannot write what its cache is needed for: %s", exc)
        except Exception:  # logged; the drain watch goes on
            log.exception("glidein agent: cannot work out what its cache is needed for")
        return None

    def retire(self) -> None:
        """Drain: no new task; running ones finish and are reported; lanes leave when idle."""
        if not self.board.closed:
            cancelled = self.board.close("the glidein is retiring")
            log.info(
                "glidein agent: the glidein retires; %d task(s) not started go back, %d running",
                len(cancelled),
                self.board.busy(),
            )

    def stop(self) -> None:
        """Leave now (SIGTERM, or the glidein's HTCondor ended): lanes give back what they hold."""
        self.board.close("the agent stops")
        for event in self.stops:
            event.set()

    def lanes_alive(self) -> int:
        return sum(1 for thread in self._threads if thread.is_alive())

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for every lane to leave; True if they all did within ``timeout``."""
        for thread in self._threads:
            thread.join(timeout)
        return self.lanes_alive() == 0

    def close(self) -> None:
        """Stop the hook link and the event loop (after :meth:`wait`)."""
        self._done.set()
        if self._watcher is not None:
            self._watcher.join()
        if self._server is not None:
            self._server.stop()
        if self._loop is not None:
            self._loop.stop()
