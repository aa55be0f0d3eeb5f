"""A task's process dies with its pilot (a killed pilot left its task running, so that
after the requeue two copies of it ran at once).

The first net is the pilot's task guardian (``agent.task_guardian``): one small process per pilot
process, started with the first task (:func:`start_task`), that holds the reading end of a pipe
whose only writer is the pilot.  The pilot registers each task's process group with it once the
task has started and forgets it once the task has ended (:func:`kill_group`); when the pilot
dies, even by SIGKILL or the OOM killer, the kernel closes the pipe and the guardian SIGKILLs the
groups still registered: the task and everything it started in its group.  The task starts as a
plain command with no ``preexec_fn``, so CPython starts it with vfork (measured: 1.1 ms of CPU
per start of ``/bin/true``, against 2.5 ms under ``setpriv``, below).  A pilot SIGKILLed in the
microseconds between the task's start and its registration leaves that task to the last net.

Where no guardian can be started (or one died and three starts have been spent), each task
asks the kernel for SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``), which the kernel
sends when the *thread* that started the task ends (prctl(2)), so the agent starts each task
from its pilot's thread, which lives as long as the pilot.  Two ways to set it
(:func:`deathsig_start`): where util-linux ``setpriv --pdeathsig`` is found, the task's command is
run under it (setpriv sets the signal, then execs the command: it survives execve(2) unless the
command is set-user-ID, set-group-ID or has capabilities, prctl(2)), with no ``preexec_fn``; else
through ctypes in a ``preexec_fn`` between fork and exec (:func:`die_with_parent`), which copies
the whole pilot process with fork.  Off Linux (no prctl) that is a no-op.

And on every way out of the agent (the task's end, its time limit, a stop, SIGTERM, an
exception) the task's whole process group is killed (:func:`kill_group`).  The last net is the
batch system's: HTCondor kills the job's process tree.

Python 3.9, standard library only.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

import glidein_ext
from glidein_ext.procs import children_of

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
log = logging.getLogger("glidein_ext.agent")


def _prctl() -> Callable[..., int] | None:
    """libc's prctl, or None off Linux or where it cannot be found."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError) as exc:
        log.warning("no prctl: a task outlives a killed pilot until its job ends (%s)", exc)
        return None
    return function


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get ``sig`` when this process's thread ends; None
    where the platform has no such thing (documented no-op)."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def in_child() -> None:
        # Between fork and exec in the child: no logging, no locks.
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the pilot died before the call took effect
            os.kill(os.getpid(), sig)

    return in_child


@functools.lru_cache(maxsize=1)
def setpriv_pdeathsig() -> str | None:
    """The path of a ``setpriv`` that sets the parent-death signal (util-linux 2.33 or later:
    glidein worker nodes may have none), checked once by running it; None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    found = shutil.which("setpriv")
    if found is None:
        return None
    try:
        proc = subprocess.run(
            [found, "--pdeathsig", "KILL", "--", "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("setpriv unusable, tasks start with a preexec_fn: %s", exc)
        return None
    return found if proc.returncode == 0 else None


def _resolvable(program: str, cwd: Path, env: Mapping[str, str]) -> bool:
    """Whether ``program`` names an executable file the way exec would find it from ``cwd`` with
    ``env``'s PATH (what ``setpriv`` will run)."""
    if os.sep in program:
        path = Path(program) if os.path.isabs(program) else cwd / program
        return path.is_file() and os.access(path, os.X_OK)
    return shutil.which(program, path=env.get("PATH", os.defpath)) is not None


def deathsig_start(
    argv: Sequence[str], cwd: Path, env: Mapping[str, str]
) -> tuple[list[str], Callable[[], None] | None]:
    """The command line and ``preexec_fn`` that start ``argv`` so that it gets SIGKILL when the
    starting thread ends: under ``setpriv --pdeathsig KILL`` with no ``preexec_fn`` (vfork) where
    setpriv works and the program is found, else ``argv`` itself with :func:`die_with_parent` (a
    program that is not found then fails in ``Popen`` as without this wrapper)."""
    setpriv = setpriv_pdeathsig()
    if setpriv is not None and argv and _resolvable(argv[0], cwd, env):
        return [setpriv, "--pdeathsig", "KILL", "--", *argv], None
    return list(argv), die_with_parent()


class TaskGuardian:
    """The pilot's end of its task guardian (``agent.task_guardian``): the process groups of
    the running tasks, written down the guardian's pipe.  A guardian that dies (the pipe breaks)
    is started again with every group still registered, at most :attr:`STARTS` times in all;
    past that :meth:`available` says no and tasks start the ``setpriv`` way.  Thread-safe: the
    pilots of one process share it."""

    STARTS = 3

    def __init__(self, command: Sequence[str], env: Mapping[str, str]) -> None:
        self._command = list(command)
        self._env = dict(env)
        self._lock = threading.Lock()
        self._groups: set[int] = set()
        self._process: subprocess.Popen[bytes] | None = None
        self._pipe: int | None = None
        self._starts = 0

    def available(self) -> bool:
        """Whether a guardian runs, starting one if none does yet."""
        with self._lock:
            return self._pipe is not None or self._start()

    def watch(self, group: int) -> bool:
        """Register a started task's process group; False when no guardian could take it."""
        with self._lock:
            self._groups.add(group)
            return self._send(b"+%d\n" % group)

    def forget(self, group: int) -> None:
        """The task's group has been ended (a group never watched is ignored)."""
        with self._lock:
            if group in self._groups:
                self._groups.discard(group)
                self._send(b"-%d\n" % group)

    @property
    def groups(self) -> frozenset[int]:
        """The process groups registered now."""
        with self._lock:
            return frozenset(self._groups)

    @property
    def pid(self) -> int | None:
        """The guardian's process id, None while none runs."""
        with self._lock:
            return None if self._pipe is None or self._process is None else self._process.pid

    def close(self) -> None:
        """Close the pipe: the guardian kills what is still registered and exits; reap it."""
        with self._lock:
            if self._pipe is not None:
                os.close(self._pipe)
                self._pipe = None
            if self._process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._process.wait(timeout=10)
            self._starts = self.STARTS  # closed for good

    def _send(self, line: bytes) -> bool:
        if self._pipe is not None:
            try:
                os.write(self._pipe, line)
                return True
            except OSError as exc:  # the guardian died: EPIPE
                code = None
                if self._process is not None:  # reaped: its pipe's end is closed, it is ending
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        code = self._process.wait(timeout=1)
                log.warning("task guardian gone (exit code %s): %s", code, exc)
                os.close(self._pipe)
                self._pipe = None
        return self._start()  # a fresh guardian gets every group, this line's change included

    def _start(self) -> bool:
        if self._starts >= self.STARTS:
            return False
        self._starts += 1
        reading, writing = os.pipe()
        try:
            self._process = subprocess.Popen(
                self._command,
                stdin=reading,
                stdout=subprocess.DEVNULL,
                env=self._env,
                close_fds=True,
            )
        except OSError as exc:
            os.close(writing)
            log.warning("no task guardian (%s): the task starts the setpriv way", exc)
            return False
        finally:
            os.close(reading)
        self._pipe = writing
        if not self._groups:
            return True
        try:
            os.write(writing, b"".join(b"+%d\n" % group for group in self._groups))
            return True
        except OSError as exc:
            log.warning("task guardian gone at once: %s", exc)
            os.close(writing)
            self._pipe = None
            return False


def guardian_command() -> tuple[list[str], dict[str, str]]:
    """The command line and environment that run ``agent.task_guardian`` with this Python
    (``-S``: the standard library is all it needs) from wherever this package was found."""
    root = str(Path(glidein_ext.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return [sys.executable, "-S", "-m", "glidein_ext.agent.task_guardian"], env


_guardians: dict[int, TaskGuardian] = {}  # by the pilot process's pid: a forked child has none
_guardians_lock = threading.Lock()


def process_guardian() -> TaskGuardian | None:
    """This process's task guardian (made on first use, closed at the process's exit so that it
    is reaped, not left to ``Popen``'s "still running" warning); None where there is no Python
    to run one with."""
    if not sys.executable:
        return None
    with _guardians_lock:
        guardian = _guardians.get(os.getpid())
        if guardian is None:
            guardian = _guardians[os.getpid()] = TaskGuardian(*guardian_command())
            atexit.register(guardian.close)
        return guardian


def start_task(
    argv: Sequence[str], cwd: Path, env: Mapping[str, str], output: IO[bytes]
) -> subprocess.Popen[bytes]:
    """Start a task as its own process group, stdout and stderr into ``output``, so that it
    dies with this process: watched by the task guardian where one runs, else the
    :func:`deathsig_start` way."""
    guardian = process_guardian()
    if guardian is not None and guardian.available():
        preexec: Callable[[], None] | None = None
        command = list(argv)
    else:
        guardian = None
        command, preexec = deathsig_start(argv, cwd, env)
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, killed as one
        preexec_fn=preexec,  # noqa: PLW1509 -- None, or async-signal-safe: one prctl call
    )
    if guardian is not None and not guardian.watch(process.pid):
        log.warning("task %d is not watched: no task guardian could be started", process.pid)
    return process


def kill_group(process: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """End the task: SIGTERM its process group, SIGKILL after ``grace`` seconds, reap the task,
    then SIGKILL whatever it left in its group (a task that ended may have left children); the
    task guardian then forgets the group."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break  # the group is empty: the task and all it started are gone
        except PermissionError as exc:  # not our group any more
            log.warning("cannot signal the task's process group %d: %s", process.pid, exc)
            break
        try:
            process.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError, PermissionError):  # nothing left: the usual case
        os.killpg(process.pid, signal.SIGKILL)
    guardian = _guardians.get(os.getpid())
    if guardian is not None:
        guardian.forget(process.pid)


def signal_children(parent: int, sig: int) -> int:
    """Send ``sig`` to the children of ``parent`` (a condor_starter: its job), each with its
    process group when it leads its own; how many were signalled."""
    done = 0
    for pid in children_of(parent):
        try:
            group = os.getpgid(pid)
            if group == pid:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
            done += 1
        except (ProcessLookupError, PermissionError) as exc:
            log.info("cannot signal process %d of %d: %s", pid, parent, exc)
    return done
