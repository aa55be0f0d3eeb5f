"""A task's process dies with its pilot (a killed pilot left its task running, so that
after the requeue two copies of it ran at once).

Two nets.  On Linux the task's process asks the kernel for SIGKILL when its parent dies
(``prctl(PR_SET_PDEATHSIG)``): that covers a pilot killed by SIGKILL or the OOM killer.  The
kernel sends it when the *thread* that started the task ends (prctl(2), PR_SET_PDEATHSIG), so the
agent starts each task from its pilot's thread, which lives as long as the pilot.  Two ways to set
it (:func:`task_start`): where util-linux ``setpriv --pdeathsig`` is found, the task's command is
run under it (setpriv sets the signal, then execs the command: it survives execve(2) unless the
command is set-user-ID, set-group-ID or has capabilities, prctl(2)), with no ``preexec_fn``, so
CPython starts the task with vfork instead of copying the whole pilot process with fork; else
through ctypes in a ``preexec_fn`` between fork and exec (:func:`die_with_parent`).  The setpriv
way leaves a window of the few microseconds before setpriv's prctl call in which a pilot killed by
SIGKILL leaves the task to the second net's batch-system cleanup (the ``preexec_fn`` checks for
that case).  Off Linux (no prctl) it is a no-op.  And on every way out of the agent (the task's
end, its time limit, a stop, SIGTERM, an exception) the task's whole process group is killed
(:func:`kill_group`), which also takes the processes the task started itself; those outlive a
pilot killed by SIGKILL only until the batch system cleans the job up (HTCondor kills the job's
process tree).

Python 3.9, standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

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


def task_start(
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


def kill_group(process: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """End the task: SIGTERM its process group, SIGKILL after ``grace`` seconds, reap the task,
    then SIGKILL whatever it left in its group (a task that ended may have left children)."""
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
