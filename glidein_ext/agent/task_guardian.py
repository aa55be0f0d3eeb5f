"""A pilot's task guardian: the pilot's tasks end when the pilot ends, however it ends.

The pilot starts one guardian (``python -S -m glidein_ext.agent.task_guardian``, from
``agent.taskproc``) with a pipe as its standard input whose only writer is the pilot.  The pilot
writes ``+PGID`` on a line when it has started a task (each task leads its own process group)
and ``-PGID`` once it has ended it.  When the pipe reads end-of-file the pilot is gone: it
exited, or was SIGKILLed, or the OOM killer took it (the kernel closes a dead process's
descriptors in every case).  The guardian then SIGKILLs every process group still registered:
the task and everything it started that stayed in its group, and exits.

It ignores SIGINT, SIGTERM and SIGHUP: a signal sent to the pilot's process group (Ctrl-C in a
terminal, a batch system's soft kill) must leave it watching while the pilot ends its tasks
itself, since it ends on the pipe's end-of-file anyway.

Python 3.9, standard library only; nothing happens at import.
"""

from __future__ import annotations

import contextlib
import os
import signal


def kill_groups(groups: set[int]) -> None:
    """SIGKILL each process group; one already gone is skipped."""
    for group in groups:
        with contextlib.suppress(OSError):  # gone already, or no longer ours
            os.killpg(group, signal.SIGKILL)


def apply(groups: set[int], line: bytes) -> None:
    """One line of the pilot's: ``+PGID`` registers a group, ``-PGID`` forgets it; anything
    else is ignored (the pilot is the only writer)."""
    sign, number = line[:1], line[1:].strip()
    if not number.isdigit() or int(number) <= 1:  # never group 0 (ours) or init's
        return
    if sign == b"+":
        groups.add(int(number))
    elif sign == b"-":
        groups.discard(int(number))


def watch(fd: int) -> set[int]:
    """Read the pilot's lines from ``fd`` until end-of-file; the groups still registered."""
    groups: set[int] = set()
    pending = b""
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            return groups
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            apply(groups, line)


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    kill_groups(watch(0))


if __name__ == "__main__":
    main()
