"""A task's process dies with its pilot (a killed pilot left its task running, so that
after the requeue two copies of it ran at once).

Two nets.  On Linux the task's process asks the kernel for SIGKILL when its parent dies
(``prctl(PR_SET_PDEATHSIG)``, through ctypes, set between fork and exec): that covers a pilot
killed by SIGKILL or the OOM killer.  The kernel sends it when the *thread* that started the task
ends, so the agent starts tasks from its main thread, which lives as long as the pilot.  Elsewhere
(no prctl) it is a no-op.  And on every way out of the agent (the task's end, its time limit, a
stop, SIGTERM, an exception) the task's whole process group is killed (:func:`kill_group`), which
also takes the processes the task started itself; those outlive a pilot killed by SIGKILL only
until the batch system cleans the job up (HTCondor kills the job's process tree).

Python 3.9, standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable

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
