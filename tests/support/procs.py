"""Looking at real processes from a test: what a test waits for (with a poll), never what it
assumes a process is at one instant."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil


def child_named(parent: psutil.Process, name: str) -> psutil.Process | None:
    """A descendant of ``parent`` named ``name``, or None yet.  A child between fork and exec
    still has its parent's name (python3 for a task the agent starts): poll this, as in
    ``wait_until(lambda: child_named(agent, "sleep"), ...)``."""
    import psutil

    for child in parent.children(recursive=True):
        try:
            if child.name() == name:
                return child
        except psutil.NoSuchProcess:
            continue
    return None


def running(pid: int) -> bool:
    """The process lives (a zombie waiting for its reaper is dead)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
