"""`glidein-ext wrapper`: start a glidein's HTCondor and keep its side of the handshake.

Sfiligoi 2013, "glideinWMS changes": the wrapper writes `.pilot.ad` with USED_FRACTION1k = 0 before
the
HTCondor daemons start; then condor_master runs with the glidein configuration (the shipped
snippet ``condor_config.d/50-glidein-ext-glidein.config`` included), the startd cron and the job
hooks keep `.pilot.ad` current, and the wrapper watches `.site.ad` (watchdog, inotify) so that a
vacate request takes effect within seconds: it rewrites `.pilot.ad` and sends SIGHUP to
condor_master, whose reconfig re-runs the startd cron at once
(STARTD_CRON_GLIDEINEXT_RECONFIG_RERUN).
SIGTERM, SIGINT and SIGQUIT are forwarded to condor_master; the wrapper exits when it does.

With a Task Queue (``--tq URL --site S``, ``glidein.handoff.wiring``) the wrapper also runs
the pilot agent (``glidein.handoff.agent``) in this process, started before condor_master so that
the startd's first fetch finds it: its lanes register, join the site DHT and hand their tasks to
the startd through the fetch-work hooks.  The agent drains with the glidein (it watches the same
drain order) and leaves the Task Queue before the wrapper exits; when condor_master ends for any
other reason the agent is stopped (its lanes give back what they hold).  ``agent_only`` runs the
agent alone, beside a condor_master started by someone else (glideinWMS's condor_startup.sh).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from glidein_ext.adfile import write_text_atomic
from glidein_ext.condor import config_value, startd_node_config
from glidein_ext.errors import CondorError, GlideinExtError, UsageError
from glidein_ext.glidein import jobtable
from glidein_ext.glidein.batchjob import read_batch_identity
from glidein_ext.glidein.handoff import wiring as tqwork
from glidein_ext.glidein.handoff.wiring import TqOptions
from glidein_ext.glidein.info import GlideinInfo, load_info, state_dir
from glidein_ext.glidein.refresh import current_order, refresh
from glidein_ext.glidein.settings import Settings
from glidein_ext.glidein.sitead import SITE_AD_FILE
from glidein_ext.glidein.startup import init_glidein
from glidein_ext.procs import children_of, pid_alive

# condor_master's exit status after DAEMON_SHUTDOWN: a normal end (glideinWMS treats it so too).
DAEMON_SHUTDOWN_STATUS = 99
SITE_AD_DEBOUNCE = 0.3
# Seconds the startd may be missing before a retiring glidein is ended (a crashed startd is
# restarted by condor_master after 10 s; one that left by DAEMON_SHUTDOWN is not).
STARTD_GONE_GRACE = 15.0
AGENT_DRAIN_GRACE = 30.0  # seconds a drained glidein's agent lanes get to leave by themselves
AGENT_STOP_GRACE = 60.0  # then, seconds to leave after being told to
_CHANGE_EVENTS = frozenset({"created", "modified", "deleted", "moved", "closed"})


@dataclass(frozen=True)
class WrapperConfig:
    """How to start one glidein."""

    start_dir: str
    cpus: int
    memory_mb: int
    name: str
    snippet: str
    base_config: str | None = None
    launcher: str | None = None
    lifetime: int | None = None
    retire_after: int | None = None
    settings: Settings = field(default_factory=Settings)
    extra_config: tuple[str, ...] = ()
    condor_master: str = "condor_master"
    static_slots: bool = False
    # The pool the startd joins (COLLECTOR_HOST over the base config's): in glideinWMS terms the
    # VO's pool, while the glidein itself is a job of the site's batch system.
    collector: str | None = None
    site: str | None = None  # GLIDEIN_Site
    tq: TqOptions | None = None  # Task Queue work through the fetch-work hooks
    agent_only: bool = False  # run the agent only (HTCondor is started by someone else)
    watch_pid: int | None = None  # agent only: end when this process (the glidein's) has ended


def identity_lines(cfg: WrapperConfig, batch: Mapping[str, str]) -> list[str]:
    """GLIDEIN_ExtName, GLIDEIN_Site and the site job's identity (batchjob.py), published (pure)."""
    values = {"GLIDEIN_ExtName": cfg.name, **({"GLIDEIN_Site": cfg.site} if cfg.site else {})}
    values.update(batch)
    lines = [f'{key} = "{config_value(value)}"' for key, value in values.items()]
    return [*lines, f"STARTD_ATTRS = $(STARTD_ATTRS) {' '.join(values)}"]


def render_condor_config(
    cfg: WrapperConfig, launcher: str, info: GlideinInfo, batch: Mapping[str, str] | None = None
) -> str:
    """The glidein's condor_config (pure): base, pool, identity and layout, the snippet, extras."""
    local = os.path.join(state_dir(cfg.start_dir), "condor")
    s = cfg.settings
    lines = [
        "# Written by `glidein-ext wrapper`; regenerated at every start.",
        *startd_node_config(
            cfg.name,
            local,
            cfg.cpus,
            cfg.memory_mb,
            base_config=cfg.base_config,
            static_slots=cfg.static_slots,
        ),
    ]
    if cfg.collector:
        lines.append(f"COLLECTOR_HOST = {config_value(cfg.collector)}")
    lines += identity_lines(cfg, batch or {})
    if info.todie is not None:
        lines += [f"GLIDEIN_ToDie = {info.todie}", "STARTD_ATTRS = $(STARTD_ATTRS) GLIDEIN_ToDie"]
    if info.retire_time is not None:
        lines += [
            f"GLIDEIN_ToRetire = {info.retire_time}",
            "STARTD_ATTRS = $(STARTD_ATTRS) GLIDEIN_ToRetire",
        ]
    lines += [
        f"GLIDEIN_EXT_START_DIR = {config_value(cfg.start_dir)}",
        f"GLIDEIN_EXT_BIN = {config_value(launcher)}",
        f"GLIDEIN_EXT_CRON_PERIOD = {s.cron_period}",
        f"GLIDEIN_EXT_DEADLINE_MARGIN = {s.deadline_margin}",
        f"GLIDEIN_EXT_MAX_VACATE_TIME = {s.max_vacate_time}",
        f"GLIDEIN_EXT_DEFAULT_RETIREMENT = {s.default_retirement}",
        *tqwork.config_lines(cfg.start_dir, cfg.tq),
        f"include : {config_value(cfg.snippet)}",
    ]
    lines += [config_value(line) for line in cfg.extra_config]
    return "\n".join(lines) + "\n"


def write_launcher(start_dir: str, env: Mapping[str, str]) -> str:
    """A launcher script for HTCondor to run this same glidein-ext (same python, same path)."""
    bindir = os.path.join(state_dir(start_dir), "bin")
    os.makedirs(bindir, mode=0o755, exist_ok=True)
    path = os.path.join(bindir, "glidein-ext")
    body = ["#!/bin/sh"]
    if env.get("PYTHONPATH"):
        body.append(f"PYTHONPATH={shlex.quote(env['PYTHONPATH'])}; export PYTHONPATH")
    body.append(f'exec {shlex.quote(sys.executable)} -m glidein_ext "$@"')
    write_text_atomic(path, "\n".join(body) + "\n", mode=0o755)
    return path


class StartdWatch:
    """Notices that condor_master's condor_startd child has gone (checked every 2 s)."""

    def __init__(self, master_pid: int) -> None:
        self.master_pid = master_pid
        self.seen = False
        self.missing_since: float | None = None
        self.next_check = 0.0

    def reset(self) -> None:
        self.seen = False
        self.missing_since = None

    def gone_for(self, now: float) -> float:
        """Seconds since the startd (once seen) went missing; 0 while it runs or before it ran."""
        if now >= self.next_check:
            self.next_check = now + 2.0
            if startd_running(self.master_pid):
                self.seen, self.missing_since = True, None
            elif self.seen and self.missing_since is None:
                self.missing_since = now
        return 0.0 if self.missing_since is None else now - self.missing_since


def startd_running(master_pid: int) -> bool:
    """Is a condor_startd among condor_master's children?"""
    try:
        import psutil
    except ImportError:
        return _startd_running_proc(master_pid)
    try:
        children = psutil.Process(master_pid).children()
        return any(child.name() == "condor_startd" for child in children)
    except psutil.Error:  # the master or a child vanished while we looked
        return False


def _startd_running_proc(master_pid: int) -> bool:
    return bool(children_of(master_pid, b"condor_startd"))


class GlideinWrapper:
    """Runs one glidein; :meth:`run` returns the exit status for the CLI."""

    def __init__(
        self,
        cfg: WrapperConfig,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        log: Callable[[str], None] = lambda msg: None,
    ) -> None:
        self.cfg = cfg
        self.env = dict(os.environ if env is None else env)
        self.clock = clock
        self.log = log
        self._site_ad_changed = threading.Event()
        self._master: subprocess.Popen[bytes] | None = None
        self._agent: Any = None  # glidein.handoff.agent.GlideinAgent, with a Task Queue
        self._stop = threading.Event()  # agent only: a signal asked us to end

    def now(self) -> int:
        return int(self.clock())

    def prepare(self) -> str:
        """Write glidein.json, the initial `.pilot.ad` and the condor config; return its path."""
        cfg = self.cfg
        if not os.path.isdir(cfg.start_dir):
            raise UsageError(f"start dir {cfg.start_dir} is not a directory")
        if not os.path.isfile(cfg.snippet):
            raise UsageError(f"config snippet {cfg.snippet} not found")
        if cfg.base_config and not os.path.isfile(cfg.base_config):
            raise UsageError(f"base config {cfg.base_config} not found")
        now = self.now()
        info = GlideinInfo(
            cpus=cfg.cpus,
            start_time=now,
            todie=now + cfg.lifetime if cfg.lifetime else None,
            retire_time=now + cfg.retire_after if cfg.retire_after else None,
            priority_factor=cfg.settings.priority_factor,
            expected_end_sources=cfg.settings.expected_end_sources,
            max_end_sources=cfg.settings.max_end_sources,
            name=cfg.name,
        )
        result = init_glidein(cfg.start_dir, info, now, self.env)
        for problem in result.errors:
            self.log(f"warning: {problem}")
        launcher = cfg.launcher or write_launcher(cfg.start_dir, self.env)
        tqwork.write_hook_launchers(cfg.start_dir, launcher, fetch=cfg.tq is not None)
        config_path = os.path.join(state_dir(cfg.start_dir), "condor_config")
        batch = read_batch_identity(self.env)
        write_text_atomic(config_path, render_condor_config(cfg, launcher, info, batch))
        for sub in ("log", "execute", "spool"):
            os.makedirs(os.path.join(state_dir(cfg.start_dir), "condor", sub), exist_ok=True)
        return config_path

    def run(self) -> int:
        if self.cfg.agent_only:
            return self.run_agent_only()
        config_path = self.prepare()
        env = dict(self.env)
        env["CONDOR_CONFIG"] = config_path
        pidfile = os.path.join(state_dir(self.cfg.start_dir), "condor", "master.pid")
        self._start_agent()
        try:
            self._master = subprocess.Popen(
                [self.cfg.condor_master, "-f", "-pidfile", pidfile], env=env
            )
        except OSError as exc:
            self._stop_agent()
            raise CondorError(f"cannot start {self.cfg.condor_master}: {exc.strerror}") from exc
        self.log(f"condor_master started (pid {self._master.pid}), config {config_path}")
        previous = self._install_signal_handlers()
        observer = self._watch_site_ad()
        try:
            status = self._supervise()
        finally:
            if observer is not None:
                observer.stop()
                observer.join(timeout=5)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._stop_agent()
        self._final_refresh()
        if status == DAEMON_SHUTDOWN_STATUS:
            self.log("HTCondor shut down by itself (DAEMON_SHUTDOWN): normal end")
            return 0
        self.log(f"condor_master exited with status {status}")
        return status if status >= 0 else 128 - status

    def _supervise(self) -> int:
        master = self._master
        assert master is not None
        watch = StartdWatch(master.pid)
        while True:
            try:
                return master.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
            if self._site_ad_changed.is_set():
                time.sleep(SITE_AD_DEBOUNCE)
                self._site_ad_changed.clear()
                self.on_site_ad_change()
            if watch.gone_for(time.monotonic()) > STARTD_GONE_GRACE and self._retiring():
                # The startd left by DAEMON_SHUTDOWN; condor_master would only notice at its next
                # ad update (MASTER_UPDATE_INTERVAL, 5 min by default), so end it now.
                self.log("the startd exited while retiring: shutting condor_master down")
                master.send_signal(signal.SIGTERM)
                watch.reset()

    def _retiring(self) -> bool:
        """Is the glidein draining (the site's order, MJF, or its own GLIDEIN_ToRetire)?"""
        errors: list[str] = []
        try:
            info: GlideinInfo | None = load_info(self.cfg.start_dir)
        except GlideinExtError:
            info = None
        order, _ = current_order(self.cfg.start_dir, self.now(), self.env, info, errors)
        return order.retire

    # --- the Task Queue agent (glidein_ext.glidein.handoff.wiring) ---

    def _start_agent(self) -> None:
        """Start the pilot agent (with ``--tq``); a failure leaves the glidein without Task
        Queue work (VO jobs still run), said in the log."""
        cfg = self.cfg
        if cfg.tq is None:
            return
        try:
            self._agent = tqwork.build_agent(
                cfg.tq,
                start_dir=cfg.start_dir,
                name=cfg.name,
                cpus=cfg.cpus,
                memory_mb=cfg.memory_mb,
                lifetime=cfg.lifetime,
                env=self.env,
                retiring=self._retiring,
            ).start()
        except GlideinExtError as exc:
            self.log(f"warning: no Task Queue work for this glidein: {exc}")
            self._agent = None
            return
        self.log(f"pilot agent started for site {cfg.tq.site} at {cfg.tq.url}")

    def _stop_agent(self) -> None:
        """After HTCondor: a draining agent's lanes get a grace to leave by themselves (a last
        report on its way), then every lane leaves (giving back what it holds)."""
        agent, self._agent = self._agent, None
        if agent is None:
            return
        if agent.board.closed and not self._stop.is_set():
            agent.wait(AGENT_DRAIN_GRACE)
        agent.stop()
        if not agent.wait(AGENT_STOP_GRACE):
            self.log(f"warning: {agent.lanes_alive()} agent lane(s) still running")
        agent.close()
        self.log(f"pilot agent ended: {sum(agent.ran)} task(s) run, {agent.failed} lane(s) failed")

    def run_agent_only(self) -> int:
        """Run the agent beside a condor_master someone else started (glideinWMS): until it has
        drained and left, a signal, or the end of ``watch_pid``."""
        cfg = self.cfg
        if cfg.tq is None:
            raise UsageError("--agent-only needs --tq")
        if not os.path.isdir(cfg.start_dir):
            raise UsageError(f"start dir {cfg.start_dir} is not a directory")
        launcher = cfg.launcher or write_launcher(cfg.start_dir, self.env)
        tqwork.write_hook_launchers(cfg.start_dir, launcher, fetch=True)
        self._start_agent()
        if self._agent is None:
            return 1
        previous = {
            sig: signal.signal(sig, lambda *_: self._stop.set())
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        }
        try:
            while not self._stop.wait(1.0):
                if cfg.watch_pid is not None and not pid_alive(cfg.watch_pid):
                    self.log(f"process {cfg.watch_pid} ended: the agent leaves")
                    break
                if self._agent.lanes_alive() == 0:
                    break
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            failed = self._agent.failed == self._agent.config.lanes
            self._stop_agent()
        return 1 if failed else 0

    def on_site_ad_change(self) -> None:
        """Rewrite `.pilot.ad` and make HTCondor re-run the startd cron now (SIGHUP = reconfig)."""
        result = refresh(self.cfg.start_dir, self.now(), self.env)
        order = result.order
        self.log(
            f".site.ad changed: retire={order.retire} deadline={order.deadline} "
            f"source={order.source}" + (f" errors={result.errors}" if result.errors else "")
        )
        if self._master is not None and self._master.poll() is None:
            self._master.send_signal(signal.SIGHUP)

    def _final_refresh(self) -> None:
        try:
            jobtable.update_table(
                self.cfg.start_dir, lambda t: jobtable.JobTable(last_job_start=t.last_job_start)
            )
            refresh(self.cfg.start_dir, self.now(), self.env)
        except Exception as exc:  # noqa: BLE001 -- the glidein is ending: log it and go on
            self.log(f"warning: final .pilot.ad update failed: {exc}")

    def _install_signal_handlers(self) -> dict[int, Any]:
        forward: dict[int, int] = {
            signal.SIGTERM: signal.SIGTERM,
            signal.SIGINT: signal.SIGTERM,
            signal.SIGQUIT: signal.SIGQUIT,
            signal.SIGHUP: signal.SIGHUP,
        }
        previous: dict[int, Any] = {}

        def handler(signum: int, frame: FrameType | None) -> None:
            del frame
            master = self._master
            if master is not None and master.poll() is None:
                self.log(f"forwarding signal {signum} as {forward[signum]} to condor_master")
                master.send_signal(forward[signum])

        for signum in forward:
            previous[signum] = signal.signal(signum, handler)
        return previous

    def _watch_site_ad(self) -> Any:
        """Start a watchdog observer on the start dir; None if watchdog is unavailable."""
        try:
            from watchdog.events import FileSystemEvent, FileSystemEventHandler
            from watchdog.observers import Observer
        except ImportError:
            self.log("warning: watchdog not available; .site.ad is read every cron period only")
            return None
        changed = self._site_ad_changed

        class SiteAdHandler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                # Reads (opened, closed_no_write) are not changes: our own reads would loop.
                if event.event_type not in _CHANGE_EVENTS:
                    return
                paths = [event.src_path, getattr(event, "dest_path", "")]
                if any(os.path.basename(str(p)) == SITE_AD_FILE for p in paths if p):
                    changed.set()

        observer = Observer()
        observer.schedule(SiteAdHandler(), self.cfg.start_dir, recursive=False)
        observer.daemon = True
        observer.start()
        return observer
