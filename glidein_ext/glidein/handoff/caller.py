"""Who is calling on the hook link: the caller's process ancestry (the agent's side).

In a glidein every process runs as the glidein's user: the startd, the starters, the hooks, the
agent and the payloads (the tasks and the VO's jobs) alike, so the socket's uid check lets a
payload in.  What a payload cannot choose is its parent: HTCondor's hooks are the children of
the daemon that runs them (the launchers ``exec``, so the connecting process is that child), and
a job's processes descend from the condor_starter that runs that job.  So:

- ``fetch``, ``reply``, ``evict`` (FETCH_WORK, REPLY_FETCH, EVICT_CLAIM) must come from a child
  of the glidein's condor_startd;
- ``prepare`` (PREPARE_JOB) from a child of a condor_starter whose parent is that startd (the
  agent binds the task to that starter, one task a starter);
- ``exit`` (JOB_EXIT) from a child of the very starter the task is bound to.

The glidein's startd is the first condor_startd that calls (pinned with its start time: it
fetches when it starts, before any job runs); should it end, the next condor_startd child of the
same condor_master takes its place.  A process is known by ``/proc/PID/stat`` (its parent, its
start time) and the name of its executable (``/proc/PID/exe``).  :class:`CallerGate` is the pure
rule over a :class:`ProcessTable`; :class:`ProcFs` reads Linux's /proc.

Python 3.9, standard library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

from glidein_ext.errors import AgentLinkError

STARTD = "condor_startd"
STARTER = "condor_starter"


@dataclass(frozen=True)
class Proc:
    """One process as the gate sees it."""

    pid: int
    ppid: int
    name: str  # the base name of its executable
    ticks: int  # its start time (clock ticks since boot): a pid is reused, this is not


class ProcessTable(Protocol):
    def get(self, pid: int) -> Proc | None:
        """The process ``pid``, or None when it is gone or cannot be read."""


class ProcFs:
    """Processes from Linux's /proc."""

    def __init__(self, root: str = "/proc") -> None:
        self.root = root

    def get(self, pid: int) -> Proc | None:
        if pid <= 0:
            return None
        try:
            with open(f"{self.root}/{pid}/stat", "rb") as handle:
                stat = handle.read().decode("utf-8", "replace")
        except OSError:
            return None
        # "pid (comm) state ppid ... starttime": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        try:
            ppid, ticks = int(fields[1]), int(fields[19])
        except (IndexError, ValueError):
            return None
        try:
            exe = os.readlink(f"{self.root}/{pid}/exe")
        except OSError:
            exe = ""
        name = os.path.basename(exe.split(" (deleted)")[0])
        return Proc(pid, ppid, name, ticks)


def _is(proc: Proc | None, name: str) -> bool:
    return proc is not None and proc.name == name


class CallerGate:
    """Tells the hook link's callers apart by their ancestry (see the module)."""

    def __init__(self, table: ProcessTable) -> None:
        self.table = table
        self.startd: Proc | None = None  # the glidein's condor_startd, once it called

    def _alive(self, proc: Proc) -> bool:
        now = self.table.get(proc.pid)
        return now is not None and now.ticks == proc.ticks

    def _parent(self, peer: int | None) -> Proc | None:
        if peer is None:
            raise AgentLinkError("the caller's process is unknown (no SO_PEERCRED)")
        caller = self.table.get(peer)
        return None if caller is None else self.table.get(caller.ppid)

    def _is_our_startd(self, proc: Proc | None) -> bool:
        """``proc`` is the glidein's startd (pinned on first sight, or its successor)."""
        if proc is None or not _is(proc, STARTD):
            return False
        pinned = self.startd
        if pinned is None or (pinned.pid, pinned.ticks) == (proc.pid, proc.ticks):
            self.startd = proc
            return True
        if not self._alive(pinned) and proc.ppid == pinned.ppid:
            self.startd = proc  # the startd was restarted by the same condor_master
            return True
        return False

    def budget(self, peer: int | None) -> str:
        """Whose connection budget a caller draws on (the hook link's door): ``startd`` for a
        child of a condor_startd that is (or may become) the glidein's, ``starter:PID`` for a
        child of a condor_starter of that startd, ``other`` for anyone else.  Pins nothing: the
        request itself is checked after (a payload can be a starter's child too, but only of its
        own starter, so it can take only its own task's budget)."""
        try:
            parent = self._parent(peer)
        except AgentLinkError:
            return "other"
        if self._may_be_our_startd(parent):
            return "startd"
        starter = parent if _is(parent, STARTER) else None
        if starter is not None and self._may_be_our_startd(self.table.get(starter.ppid)):
            return f"starter:{starter.pid}"
        return "other"

    def _may_be_our_startd(self, proc: Proc | None) -> bool:
        if proc is None or not _is(proc, STARTD):
            return False
        pinned = self.startd
        if pinned is None or (pinned.pid, pinned.ticks) == (proc.pid, proc.ticks):
            return True
        return not self._alive(pinned) and proc.ppid == pinned.ppid

    def check_startd(self, peer: int | None) -> None:
        """The caller is a hook of the glidein's startd; AgentLinkError otherwise."""
        parent = self._parent(peer)
        if not self._is_our_startd(parent):
            raise AgentLinkError("only the glidein's condor_startd may fetch, reply or evict")

    def starter(self, peer: int | None) -> int:
        """The pid of the condor_starter (a child of the glidein's startd) whose hook calls;
        AgentLinkError when the caller is no such hook."""
        parent = self._parent(peer)
        if parent is None or not _is(parent, STARTER):
            raise AgentLinkError("only a condor_starter's hook may speak for a task")
        if not self._is_our_startd(self.table.get(parent.ppid)):
            raise AgentLinkError("that condor_starter is not the glidein startd's")
        return parent.pid
