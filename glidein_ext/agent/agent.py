"""The pilot agent loop (Hasham 2011 §IV): register, pull a task, run it, report, heartbeat, leave.

One thread (the caller's) pulls and runs tasks; one heartbeat thread, owned by the agent and joined
before it returns, keeps the pilot alive and learns the other pilots on its host (Hasham 2011
§IV-D). Calls to the TQ are retried for ``retry_for`` seconds, so a TQ restart costs no task: the
complete report is idempotent and a repeated request returns the task the pilot already holds.
A task never ends the pilot: whatever goes wrong running it is reported as that task's failed
attempt (the TQ counts it against ``max_retries``), and a report the TQ refuses is logged and the
pilot goes on.
Tasks are started from the thread that calls ``run()`` (the main thread in ``pilot run``) and die
with the pilot (``taskproc``: its task guardian, else a parent-death signal sent when that thread
ends).  How a task runs is behind ``agent.executor``.

The site's architecture (Delgado Peris 2014 §IV) comes with the registration's answer.  Pre-DHT: as
above, and the cache's changes are reported to the TQ (file tracking).  Centralized: the pilot joins
the site DHT (``agent.sitenet``), each request carries its cache list, and the files it caches are
published in the DHT instead of reported.  Distributed: the pilot joins the DHT and the master
assigns its tasks (``distributed.worker``, ``distributed.master``); it neither asks nor
heartbeats.  With a DHT, a normal exit LEAVEs the DHT before deregistering.

The executor may have no room (a glidein's startd, ``glidein.handoff.executor``): the pilot asks
for a task only once ``executor.wait_room`` says one more can start, and leaves when it says none
will (the glidein retires).  An execution the executor calls ``evicted`` is not reported: the
pilot gets the same task back by asking again, or gives it back by leaving.
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from glidein_ext.agent.executor import SubprocessExecutor, TaskExecutor
from glidein_ext.agent.loopthread import LoopThread
from glidein_ext.agent.pilot_cache import PilotCache
from glidein_ext.agent.report_batcher import ReportBatcher
from glidein_ext.agent.settings import AgentSettings
from glidein_ext.agent.sitenet import SiteNetwork
from glidein_ext.cache.need import NeededFiles, needed_files
from glidein_ext.cache.se import StorageElement
from glidein_ext.cache.tfc import load_catalog
from glidein_ext.distributed.worker import DistributedWorker
from glidein_ext.errors import (
    DhtError,
    TaskQueueAuthError,
    TaskQueueError,
    TaskQueueNotFound,
    TaskQueueRequestError,
    TaskQueueTlsError,
)
from glidein_ext.sched.ranking import Ranker, WorkerAd
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.protocol import (
    Completion,
    Neighbour,
    RegisterAnswer,
    Registration,
    TaskAssignment,
)

T = TypeVar("T")
log = logging.getLogger("glidein_ext.agent")
# The pilot's life as an operator follows it at the default level (`pilot run` shows this logger's
# INFO): its registration, a reconnection after the Task Queue was unreachable.
life = logging.getLogger("glidein_ext.agent.life")


@dataclass(frozen=True)
class AgentConfig:
    """One pilot: where its Task Queue is, who it is (site, host, SE, its ClassAd, life), and its
    settings (``AgentSettings``: every tunable, layered; ``agent.config.agent_config`` builds
    both for the standalone pilot and a glidein's agent)."""

    url: str
    token: str
    site: str
    workdir: Path
    settings: AgentSettings = field(default_factory=AgentSettings)
    host: str = field(default_factory=socket.gethostname)
    se: str = ""
    se_dir: Path | None = None
    ttl: int | None = None
    requirements: str = "true"
    rank: str = "0"
    attributes: dict[str, Any] = field(default_factory=dict)
    centralized: bool = False  # send the cache list with each request (Hasham 2011 §IV-E)
    max_idle: float | None = None  # leave after this long without a task
    max_tasks: int | None = None
    batch_id: str | None = None


_SAID: dict[str, float] = {}  # a retry's message -> when it was last logged at WARNING
_SAID_LOCK = threading.Lock()
SAY_AGAIN_AFTER = 60.0  # seconds


def _say_retrying(message: str, more: str = "") -> None:
    """A retry's line (``message`` then ``more``): WARNING once a minute per ``message`` in this
    process (the N pilots of a swarm finding the Task Queue down say it once), INFO otherwise."""
    now = time.monotonic()
    with _SAID_LOCK:
        fresh = now - _SAID.get(message, -SAY_AGAIN_AFTER) >= SAY_AGAIN_AFTER
        if fresh:
            _SAID[message] = now
            if len(_SAID) > 1000:
                _SAID.clear()
    log.log(logging.WARNING if fresh else logging.INFO, "%s%s", message, more)


class PilotAgent:
    """One pilot: ``run()`` returns the number of tasks it ran."""

    def __init__(
        self,
        config: AgentConfig,
        stop: threading.Event | None = None,
        loop: LoopThread | None = None,
        executor: TaskExecutor | None = None,
        batcher: ReportBatcher | None = None,
    ) -> None:
        """``loop``: the process's event loop for the site DHT (several pilots of one process
        share it; one is started for this pilot otherwise); ``executor``: how tasks run;
        ``batcher``: sends this pilot's reports with those of the process's other pilots (when
        the Task Queue takes them so)."""
        self.config = config
        self.client = TqClient(config.url, config.token, ca_file=config.settings.ca_file or None)
        self.stop = stop or threading.Event()
        self.cache_dir = config.workdir / "cache"
        self.cache: PilotCache | None = None  # opened by register()
        self.pilot_id: int | None = None
        self.lost = threading.Event()
        self.answer: RegisterAnswer | None = None
        self.architecture = (
            "pre-dht"  # the Task Queue says, at registration (Delgado Peris 2014 §IV)
        )
        self.net: SiteNetwork | None = None
        self.worker: DistributedWorker | None = None  # distributed: its part in the site
        self._loop_thread = loop
        self._own_loop = loop is None
        self._executor = executor
        self._batcher = batcher
        self._report_lock = threading.Lock()
        # Its cached files that tasks still to run read (CACHED_INPUT_NEEDED_MB, ``cache.need``):
        # from the heartbeat's answer (pulling) or the TaskList (distributed).
        self.needed = NeededFiles()

    @property
    def executor(self) -> TaskExecutor:
        if self._executor is None:
            self._executor = SubprocessExecutor(self.config.workdir, self.open_cache())
        return self._executor

    @property
    def tracks_files(self) -> bool:
        """Pre-DHT: the Task Queue tracks the pilot's files from its reports (Hasham 2011 §IV-E)."""
        return self.architecture == "pre-dht"

    def _retry(self, what: str, call: Callable[[], T]) -> T:
        started = time.monotonic()
        deadline = started + self.config.settings.retry_for
        delay = 0.2
        failed = False
        while True:
            try:
                answer = call()
            except (
                TaskQueueNotFound,
                TaskQueueAuthError,
                TaskQueueRequestError,
                TaskQueueTlsError,  # the server is not trusted: no retry makes it so
            ):
                raise
            except TaskQueueError as exc:
                left = deadline - time.monotonic()
                if left < 0 or (self.stop.is_set() and what != "complete"):
                    raise
                _say_retrying(f"{what} failed ({exc})", f"; retrying for up to {left:.0f} s")
                failed = True
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            if failed:
                life.info(
                    "reconnected to the Task Queue (%s) after %.0f s",
                    what,
                    time.monotonic() - started,
                )
            return answer

    def open_cache(self) -> PilotCache:
        if self.cache is None:
            c = self.config
            se = None
            if c.se_dir is not None:
                se = StorageElement(
                    c.se_dir,
                    delay_factor=c.settings.se_delay,
                    failure_rate=c.settings.se_failure_rate,
                    time_scale=c.settings.se_time_scale,
                )
            self.cache = PilotCache(
                self.cache_dir,
                max_space=c.settings.max_space_bytes,
                min_threshold=c.settings.min_threshold_bytes,
                se=se,
                catalog=load_catalog(c.settings.storage_xml) if c.settings.storage_xml else None,
                protocols=(c.settings.tfc_protocol,),
            )
        return self.cache

    def _set_neighbours(self, others: Sequence[Neighbour]) -> None:
        cache = self.open_cache()
        with self._report_lock:  # HostShare is driven by one thread at a time
            cache.set_others(others)
            cache.poll_host()

    def heartbeat(self, pilot_id: int) -> None:
        """One heartbeat; carries the cache list when it changed (evictions, last links)."""
        cache = self.open_cache()
        with self._report_lock:
            cached = cache.changes() if self.tracks_files else None
            answer = self.client.heartbeat(pilot_id, cached)
            if cached is not None:
                cache.mark_reported(cached)
                log.info("reported %d cached file(s) to the Task Queue", len(cached))
        self._set_neighbours(answer.others)
        if answer.needed_cached is not None:  # a Task Queue that says (sizes: the cache's)
            wanted = set(answer.needed_cached)
            sizes = ((e.lfn, e.size) for e in cache.store.entries()) if wanted else ()
            self.needed.learn(needed_files(wanted, sizes), time.time())

    def report_cache(self, pilot_id: int, failed: str = "cache report failed") -> None:
        """A heartbeat now (after a task: tells the cache changes at once).  A pilot the Task
        Queue forgot stops the agent; any other failure is logged and the next beat retries."""
        try:
            self.heartbeat(pilot_id)
        except TaskQueueNotFound:
            log.warning("the Task Queue forgot pilot %s; stopping", pilot_id)
            self.lost.set()
            self.stop.set()
        except TaskQueueAuthError as exc:  # its credential was revoked: every call is refused
            log.error("the Task Queue refuses pilot %s (%s); stopping", pilot_id, exc)
            self.lost.set()
            self.stop.set()
        except TaskQueueError as exc:
            log.warning("%s (the next heartbeat retries): %s", failed, exc)

    def register(self) -> int:
        c = self.config
        cache = self.open_cache()
        cached = cache.lfns()
        if self._loop_thread is None:
            self._loop_thread = LoopThread(f"pilot-loop-{c.site}").start()
        # Bound before registering: the Task Queue records where they listen (Delgado Peris 2014
        # §III.A).
        self.net = SiteNetwork(self._loop_thread, cache, bind=c.settings.dht_bind)
        dht_address, peer_url = self.net.open()
        registration = Registration(
            site=c.site,
            host=c.host,
            se=c.se,
            cpus=c.settings.cpus,
            memory=c.settings.memory,
            disk=c.settings.disk,
            ttl=c.ttl,
            attributes=c.attributes,
            requirements=c.requirements,
            rank=c.rank,
            cache_dir=str(self.cache_dir.resolve()),
            cached=tuple(cached),
            batch_id=c.batch_id,
            dht_address=dht_address,
            peer_url=peer_url,
        )
        try:
            answer = self._retry("register", functools.partial(self.client.register, registration))
        except BaseException:
            self._close_site()
            raise
        self.answer = answer
        self.pilot_id = answer.pilot_id
        self.architecture = answer.architecture
        self.heartbeat_interval = float(answer.heartbeat_interval)
        cache.mark_reported(cached)
        cache.set_pilot_id(self.pilot_id)
        self._set_neighbours(answer.others)
        life.info(
            "registered as pilot %s at %s (%s architecture)",
            self.pilot_id,
            c.url,
            self.architecture,
        )
        try:
            self._join_site(answer)
        except BaseException:
            self._close_site()
            self._deregister(answer.pilot_id)
            raise
        return self.pilot_id

    def _join_site(self, answer: RegisterAnswer) -> None:
        """Join the site DHT (centralized, distributed), or close what was bound (pre-DHT)."""
        net = self.net
        assert net is not None
        if self.architecture == "pre-dht" or not answer.site_key or not answer.dht_id:
            self._close_site()
            return
        try:
            key = bytes.fromhex(answer.site_key)
        except ValueError as exc:
            raise DhtError("the Task Queue sent a site key that is not hex") from exc
        joined = net.join(answer.pilot_id, key, answer.dht_id, answer.site_contacts)
        log.info("pilot %s joined the site DHT through %d contact(s)", answer.pilot_id, joined)

    def _publish(self) -> None:
        if self.net is not None:
            try:
                self.net.publish_cache()
            except DhtError as exc:
                log.warning("publishing the cache in the site DHT failed: %s", exc)

    def _heartbeats(self, pilot_id: int) -> None:
        while not self.stop.wait(self.heartbeat_interval):  # a forgotten pilot sets stop
            self.report_cache(pilot_id, "heartbeat failed")
        self.client.abort_waiting()  # a standing offer would hold the stop for its whole wait

    def run(self) -> int:
        try:
            pilot_id = self.register()
            if self.architecture == "distributed":
                return self._run_distributed(pilot_id)
            return self._run_pulling(pilot_id)
        finally:
            self._close_site()  # a no-op after a normal leave
            if self._own_loop and self._loop_thread is not None:
                self._loop_thread.stop()

    def _run_pulling(self, pilot_id: int) -> int:
        """Pre-DHT and centralized: the pilot asks the Task Queue for each task."""
        beat = threading.Thread(target=self._heartbeats, args=(pilot_id,), name="tq-heartbeat")
        beat.start()
        ran = 0
        try:
            ran = self._loop(pilot_id)
        finally:
            self.stop.set()
            beat.join()
            self._leave_site()
            self._deregister(pilot_id)
        return ran

    def _run_distributed(self, pilot_id: int) -> int:
        """Distributed: the site's master assigns the tasks (Delgado Peris 2014 §III.B); no
        heartbeats."""
        c = self.config
        assert self.answer is not None and self.net is not None and self._loop_thread is not None
        attributes = {**c.attributes, "Site": c.site, "Host": c.host, "SE": c.se}
        ranker = Ranker(
            WorkerAd(
                attributes,
                c.settings.cpus,
                c.settings.memory,
                c.settings.disk,
                c.requirements,
                c.rank,
            )
        )
        worker = DistributedWorker(
            loop=self._loop_thread,
            net=self.net,
            client=self.client,
            site=c.site,
            answer=self.answer,
            ranker=ranker,
            executor=self.executor,
            stop=self.stop,
            expires_at=None if c.ttl is None else time.time() + c.ttl,
            master_settings={
                "window": c.settings.round_window,
                "period": c.settings.round_period,
                "heartbeat": max(0.5, self.answer.master_timeout / 3),
                # A worker is dead after the silence a master is allowed (a failed probe and
                # missed rounds alone are a busy process, not a death).
                "grace": max(3 * c.settings.round_period, float(self.answer.master_timeout)),
                "method": c.settings.assignment,
                "broadcast_timeout": c.settings.broadcast_timeout,
            },
            on_lost=self._forgotten,
            needed=self.needed,
        )
        self.worker = worker
        try:
            worker.start()
            return worker.run_tasks(c.max_tasks, c.max_idle)
        finally:
            worker.leave()
            self._leave_site()
            self._deregister(pilot_id)

    def _forgotten(self) -> None:
        log.warning(
            "the Task Queue forgot pilot %s, or another took its role; stopping", self.pilot_id
        )
        self.lost.set()
        self.stop.set()

    def _leave_site(self) -> None:
        """LEAVE the site DHT (its keys handed on) and stop serving files (Delgado Peris 2014
        §III.A)."""
        if self.net is not None:
            net, self.net = self.net, None
            net.leave()

    def _close_site(self) -> None:
        """Stop the DHT node and the file server without LEAVE (nothing to hand on)."""
        if self.net is not None:
            net, self.net = self.net, None
            net.close()

    def _deregister(self, pilot_id: int) -> None:
        if not self.lost.is_set():
            try:
                self.client.deregister(pilot_id)
            except TaskQueueError as exc:
                log.warning("deregister failed: %s", exc)

    def _ask(self, pilot_id: int) -> tuple[TaskAssignment | None, bool]:
        """One request (its cache list if centralized); whether it stood as an offer: with
        ``offer_wait``, a request that finds nothing stays open and an urgent task is pushed to
        it (Lee 2003 4.2.3, courier)."""
        c = self.config
        cache = self.open_cache()
        cached = cache.lfns() if self._sends_cache() else None
        asked = time.monotonic()
        try:
            request = functools.partial(
                self.client.request, pilot_id, cached, c.settings.offer_wait
            )
            task = self._retry("request", request)
        except TaskQueueError:
            if not self.stop.is_set():
                raise
            task = None  # a standing offer cut short: the pilot stops
        finally:
            self.executor.asked()
        if cached is not None:
            cache.mark_reported(cached)
        return (
            task,
            c.settings.offer_wait > 0 and time.monotonic() - asked >= c.settings.offer_wait / 2,
        )

    def _loop(self, pilot_id: int) -> int:
        ran = 0
        empty = 0  # empty answers in a row (the wait grows with them)
        idle_since = time.monotonic()
        c = self.config
        task: TaskAssignment | None = None  # the next task, from the last report's answer
        while not self.stop.is_set():
            if c.max_tasks is not None and ran >= c.max_tasks:
                break
            if task is None:
                if not self.executor.wait_room(self.stop):
                    break  # the executor takes no more tasks (its glidein retires) or we stop
                task, offered = self._ask(pilot_id)
                if task is None:
                    if c.max_idle is not None and time.monotonic() - idle_since > c.max_idle:
                        break
                    if not offered:  # a standing offer was the wait itself
                        self.stop.wait(
                            min(c.settings.poll_max, c.settings.poll_interval * 1.5**empty)
                        )
                    empty += 1
                    continue
            cache = self.open_cache()
            log.info("running task %s (%s)", task.task_id, task.name)
            execution = self.executor.execute(task, self.stop)  # never raises for the task
            if self.lost.is_set():
                break
            if self.stop.is_set():  # interrupted: the deregister below requeues the task
                log.warning(
                    "stopped: task %s (%s) given back to the Task Queue", task.task_id, task.name
                )
                break
            if execution.evicted:
                # Not the task's fault (HTCondor evicted it): no report.  Asking again gets it
                # back (the Task Queue hands a pilot the task it holds); a pilot that leaves
                # instead gives it back with its deregistration, which requeues it.
                log.info("task %s given back: %s", task.task_id, execution.outcome.report)
                task = None
                continue
            completion = execution.completion()
            if (
                self.net is not None
            ):  # centralized: the site DHT tracks files (Delgado Peris 2014 §III.A),
                self._publish()  # before the report releases the tasks that read them
            more = c.max_tasks is None or ran + 1 < c.max_tasks
            task = self._report(pilot_id, completion, more)
            if self.tracks_files:
                if completion.outputs:  # the TQ added them (pre-DHT): send the whole list
                    cache.forget_reported()
                if cache.changes() is not None:  # else the TQ's list is the cache's already
                    self.report_cache(pilot_id)
            if self.lost.is_set():
                break
            ran += 1
            empty = 0
            idle_since = time.monotonic()
        return ran

    def _report(self, pilot_id: int, completion: Completion, more: bool) -> TaskAssignment | None:
        """Report a task's end.  When the pilot takes ``more`` tasks, the executor has room for
        one now and the Task Queue takes it (its registration's answer says), the report also
        asks for the next task (Hasham 2011 §IV-E): one call per task, its answer that task, or
        None (nothing fits now: the loop asks with a plain request, which may stand as an
        offer).  Otherwise the report alone, and None."""
        combined = (
            more
            and self.answer is not None
            and self.answer.complete_and_request
            and not self.stop.is_set()
            and self.executor.has_room()
            and self.executor.wait_room(self.stop)
        )
        try:
            if not combined:
                self._retry(
                    "complete", functools.partial(self.client.complete, pilot_id, completion)
                )
                return None
            cache = self.open_cache()
            cached = cache.lfns() if self._sends_cache() else None
            send = self.client.complete_and_request
            batcher, answered = self._batcher, self.answer
            if batcher is not None and answered is not None and answered.batched_reports:
                send = batcher.complete_and_request  # with the other pilots' reports
            try:
                answer = self._retry(
                    "complete", functools.partial(send, pilot_id, completion, cached)
                )
            finally:
                self.executor.asked()
            if cached is not None:
                cache.mark_reported(cached)
            return answer.task
        except TaskQueueRequestError as exc:  # the TQ refused the report: it will not change
            log.error("the Task Queue refused the report of task %s: %s", completion.task_id, exc)
            return None

    def _sends_cache(self) -> bool:
        """Centralized: each request carries the pilot's cache list (Hasham 2011 §IV-E)."""
        return self.config.centralized or self.architecture == "centralized"
