"""The one boundary over the project's real HTCondor pools (``scripts/condor-sandbox``).

Two pools run in a Debian trixie chroot (HTCondor 23.9) as the unprivileged user ``glidein``: the
*site* pool (collector 127.0.0.1:9618, the chroot's default configuration) and the *VO* pool
(collector 127.0.0.1:9619, ``CONDOR_CONFIG=/etc/condor/vo-pool.config``).  This module starts and
stops them, runs HTCondor's own tools inside the chroot against either pool (a
:class:`CondorSandbox` is bound to one; :meth:`CondorSandbox.on` gives the other), and starts
glideins there with ``glidein-ext wrapper``.  ``glidein_ext.sandbox.site`` adds site execute nodes
and glideins that run as site jobs.  The demo and the integration tests use it; nothing here is
mocked.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from glidein_ext.errors import CondorError

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
POOL_USER = "glidein"
GLIDEIN_BASE_CONFIG = "/etc/condor/glidein-base.config"


@dataclass(frozen=True)
class Pool:
    """One of the sandbox's pools: its name, collector, and the CONDOR_CONFIG its tools use."""

    name: str
    collector: str
    config: str | None  # None: the chroot's default configuration


# The environment the host's own HTCondor clients (htcondor2, e.g. `glidein-ext site vacate`) need
# to write to the sandbox's schedds: CLAIMTOBE as the pool user (the test pools only; a real site
# authenticates its controller as a queue super user).
HOST_CLIENT_ENV = {
    "_CONDOR_SEC_CLIENT_AUTHENTICATION_METHODS": "CLAIMTOBE",
    "_CONDOR_SEC_CLAIMTOBE_USER": POOL_USER,
}

SITE_POOL = Pool("site", "127.0.0.1:9618", None)
VO_POOL = Pool("vo", "127.0.0.1:9619", "/etc/condor/vo-pool.config")
ALL_POOLS = (SITE_POOL, VO_POOL)


def default_script() -> Path:
    override = os.environ.get("GLIDEIN_EXT_SANDBOX_SCRIPT")
    return Path(override) if override else REPO / "scripts" / "condor-sandbox"


def wait_for(probe: Callable[[], T | None], timeout: float, what: str, interval: float = 1.0) -> T:
    """Call ``probe`` until it returns something truthy; CondorError naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise CondorError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def wrapper_command(start_dir: str, name: str, cpus: int, memory_mb: int) -> list[str]:
    """``glidein-ext``'s arguments that start a glidein of ``cpus`` and ``memory_mb`` named
    ``name`` in ``start_dir`` on the sandbox's base configuration (more options may follow)."""
    return [
        "wrapper",
        "--start-dir",
        start_dir,
        "--name",
        name,
        "--cpus",
        str(cpus),
        "--memory",
        str(memory_mb),
        "--base-config",
        GLIDEIN_BASE_CONFIG,
    ]


def stop_process(
    process: subprocess.Popen[bytes], steps: Sequence[tuple[signal.Signals, float]]
) -> None:
    """Send each signal in turn, waiting its grace period, until the process has exited."""
    for sig, grace in steps:
        if process.poll() is not None:
            return
        process.send_signal(sig)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue


@dataclass
class Glidein:
    """A glidein started by ``glidein-ext wrapper`` inside the chroot."""

    name: str
    start_dir: str  # path inside the chroot
    host_dir: Path  # the same directory seen from the host
    process: subprocess.Popen[bytes]
    log_path: Path

    def running(self) -> bool:
        return self.process.poll() is None

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CondorError(f"glidein {self.name} still running after {timeout:.0f} s") from None

    def stop(self) -> None:
        """Graceful shutdown (SIGTERM: the startd withdraws its ads), then fast, then kill."""
        stop_process(
            self.process, ((signal.SIGTERM, 30.0), (signal.SIGQUIT, 15.0), (signal.SIGKILL, 10.0))
        )

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


@dataclass
class ExtraSchedd:
    """A second schedd in a pool (``CondorSandbox.start_schedd``): its full name, its process."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        stop_process(self.process, ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)))


class CondorSandbox:
    """The chroot pools: build, start, stop, and HTCondor commands run inside against one pool."""

    def __init__(self, script: Path | None = None, pool: Pool = SITE_POOL) -> None:
        self.script = script or default_script()
        self.pool = pool
        self._root: Path | None = None

    def on(self, pool: Pool) -> CondorSandbox:
        """The same sandbox, its HTCondor commands aimed at ``pool``."""
        other = CondorSandbox(self.script, pool)
        other._root = self._root
        return other

    def _call(self, args: Sequence[str], timeout: float, check: bool = True) -> str:
        try:
            proc = subprocess.run(
                [str(self.script), *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise CondorError(f"condor-sandbox {' '.join(args)} timed out") from None
        except OSError as exc:
            raise CondorError(f"cannot run {self.script}: {exc.strerror}") from None
        if check and proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()
            last = detail[-1] if detail else f"exit {proc.returncode}"
            raise CondorError(f"condor-sandbox {shlex.join(args)[:200]}: {last}")
        return proc.stdout

    @property
    def root(self) -> Path:
        if self._root is None:
            self._root = Path(self._call(["path"], 30).strip())
        return self._root

    def build(self) -> None:
        self._call(["build"], timeout=1800)

    def start(self, pools: Sequence[Pool] = ALL_POOLS) -> None:
        """Start the pools (those already running are left alone); builds the chroot if needed."""
        self._call(["start", "--pools", ",".join(p.name for p in pools)], timeout=1800)

    def stop(self, pools: Sequence[Pool] = ALL_POOLS) -> None:
        """Stop the pools (all of them: unmount too, and end whatever else runs in the chroot)."""
        self._call(["stop", "--pools", ",".join(p.name for p in pools)], timeout=120)

    def stopped(self) -> list[Pool]:
        """The pools not running now (``condor-sandbox status``): those a demo starts, and so
        the only ones it stops at its end."""
        out = self._call(["status"], timeout=30, check=False)
        return [p for p in ALL_POOLS if f"{p.name} pool: running" not in out]

    def run(self, *cmd: str, timeout: float = 60, check: bool = True) -> str:
        """Run ``cmd`` inside the chroot as the pool user, against this pool; its stdout."""
        return self._call(["exec", *self.pool_env(), *cmd], timeout=timeout, check=check)

    def pool_env(self) -> list[str]:
        """The ``env CONDOR_CONFIG=...`` prefix that aims a command at this pool (none for site)."""
        return ["env", f"CONDOR_CONFIG={self.pool.config}"] if self.pool.config else []

    def run_root(self, *cmd: str, timeout: float = 60, check: bool = True) -> str:
        """Run ``cmd`` inside the chroot as root; its stdout."""
        return self._call(["root", *cmd], timeout=timeout, check=check)

    def host_path(self, chroot_path: str) -> Path:
        return self.root / chroot_path.lstrip("/")

    def make_dir(self, name: str) -> str:
        """A fresh directory owned by the pool user under its home; returns its chroot path."""
        path = f"/home/{POOL_USER}/{name}"
        self._call(["root", "rm", "-rf", path], 60)
        self._call(["root", "install", "-d", "-o", POOL_USER, "-g", POOL_USER, path], 60)
        return path

    def write_file(self, chroot_path: str, text: str) -> None:
        host = self.host_path(chroot_path)
        host.write_text(text)
        self._call(["root", "chown", f"{POOL_USER}:{POOL_USER}", chroot_path], 60)

    # --- HTCondor queries, through HTCondor's own tools ---

    def _json(self, out: str) -> list[dict[str, Any]]:
        out = out.strip()
        if not out:
            return []
        data = json.loads(out)
        return data if isinstance(data, list) else []

    def status(self, constraint: str = "true") -> list[dict[str, Any]]:
        return self._json(self.run("condor_status", "-constraint", constraint, "-json"))

    def queue(self, constraint: str = "true") -> list[dict[str, Any]]:
        return self._json(self.run("condor_q", "-allusers", "-constraint", constraint, "-json"))

    def history(self, constraint: str) -> list[dict[str, Any]]:
        return self._json(self.run("condor_history", "-constraint", constraint, "-json"))

    def submit(self, directory: str, name: str, submit_text: str) -> int:
        """Submit a submit description from ``directory``; returns the cluster id."""
        path = f"{directory}/{name}.sub"
        self.write_file(path, submit_text)
        out = self.run(
            "sh", "-c", f"cd {shlex.quote(directory)} && condor_submit -terse {name}.sub"
        )
        first = out.strip().split()[0]
        return int(first.split(".")[0])

    def remove(self, constraint: str) -> None:
        self.run("condor_rm", "-constraint", constraint, check=False)

    def start_schedd(self, local_name: str) -> ExtraSchedd:
        """Another schedd in this pool (``SCHEDD_NAME`` = ``local_name``, its own spool and port;
        not under the pool's master): a site with several schedds (``tq.manager.schedds``).  Waits
        until the collector has its ad; stop it with ``ExtraSchedd.stop``."""
        home = self.make_dir(f"schedd-{local_name}")
        for sub in ("spool", "log", "lock", "execute"):
            self.run("mkdir", "-p", f"{home}/{sub}")
        settings = {
            "SCHEDD_NAME": local_name,
            "SPOOL": f"{home}/spool",
            "LOG": f"{home}/log",
            "LOCK": f"{home}/lock",
            "EXECUTE": f"{home}/execute",
            "SCHEDD_LOG": f"{home}/log/SchedLog",
            "SCHEDD_ADDRESS_FILE": f"{home}/spool/.schedd_address",
            "SCHEDD_DAEMON_AD_FILE": f"{home}/spool/.schedd_classad",
            "USE_SHARED_PORT": "False",  # the pool's shared port belongs to its master
            "SEC_USE_FAMILY_SESSION": "False",  # not the master's child: no family session
        }
        env = [f"_CONDOR_{key}={value}" for key, value in settings.items()]
        log_path = self.host_path(f"{home}.log")
        args = ["exec", *self.pool_env(), *env, "condor_schedd", "-f", "-local-name", local_name]
        if not self.pool_env():
            args[1:1] = ["env"]
        process = self.spawn(args, log_path)

        def named() -> str | None:
            if process.poll() is not None:
                raise CondorError(f"schedd {local_name} exited: {log_path.read_text()[-500:]}")
            out = self.run("condor_status", "-schedd", "-af", "Name", check=False)
            found = [n for n in out.split() if n == local_name or n.startswith(f"{local_name}@")]
            return found[0] if found else None

        try:
            name = wait_for(named, 60, f"schedd {local_name} in condor_status", interval=0.5)
        except CondorError:
            stop_process(process, ((signal.SIGKILL, 10.0),))
            raise
        return ExtraSchedd(name, process, log_path)

    # --- glideins ---

    def start_glidein(
        self,
        name: str,
        cpus: int,
        *,
        memory_mb: int = 1024,
        cron_period: int = 60,
        lifetime: str = "2h",
        extra_args: Sequence[str] = (),
    ) -> Glidein:
        """Start `glidein-ext wrapper` in a fresh start dir; wait until its slot is in this pool
        (the wrapper's ``--collector`` names it).

        The glidein's name gets a unique suffix, so that ads a dead glidein left in the collector
        never match a new one.
        """
        name = f"{name}-{os.getpid()}-{int(time.time() * 1000) % 100000}"
        start_dir = self.make_dir(name)
        log_path = self.host_path(f"{start_dir}.wrapper.log")
        args = [
            "exec",
            "glidein-ext",
            *wrapper_command(start_dir, name, cpus, memory_mb),
            "--cron-period",
            str(cron_period),
            "--lifetime",
            lifetime,
            "--collector",
            self.pool.collector,
            *extra_args,
        ]
        process = self.spawn(args, log_path)
        glidein = Glidein(name, start_dir, self.host_path(start_dir), process, log_path)
        # Ready once the startd cron has published its first run.
        constraint = f'GLIDEIN_ExtName == "{name}" && GLIDEIN_RetireNow =!= undefined'
        self.wait_joined(process, log_path, constraint, f"glidein {name}", glidein.stop)
        return glidein

    def spawn(self, args: Sequence[str], log_path: Path) -> subprocess.Popen[bytes]:
        """Start ``condor-sandbox ARGS`` (``exec CMD...``) in the background, output to a log."""
        with open(log_path, "wb") as log:
            return subprocess.Popen(
                [str(self.script), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def wait_joined(
        self,
        process: subprocess.Popen[bytes],
        log_path: Path,
        constraint: str,
        what: str,
        stop: Callable[[], None],
    ) -> list[dict[str, Any]]:
        """Wait until a daemon ``process`` started has ads matching ``constraint``; on failure stop
        it and raise CondorError with the end of its log."""

        def tail() -> str:
            try:
                return log_path.read_text(errors="replace")[-500:]
            except OSError:
                return ""

        def joined() -> list[dict[str, Any]]:
            if process.poll() is not None:
                raise CondorError(f"{what} exited: {tail()}")
            return self.status(constraint)

        try:
            return wait_for(joined, 90, f"{what} in condor_status")
        except CondorError as exc:
            stop()
            raise CondorError(f"{what} did not join the pool: {tail()}") from exc
