"""Is a process still alive, and still the one we recorded?  (/proc, with os.kill as the fallback.)

The one copy of the liveness check: a job hook records its parent -- the condor_starter of that job
-- with the process start time, so a recycled pid is not mistaken for the starter; the cache's pin
files and host registry record a pilot's pid.  :class:`Running`: what starts processes and stops
them again, as a context manager.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import TypeVar

PID_MAX_LIMIT = 4 * 1024 * 1024  # the kernel's ceiling for pid_max (64-bit): no pid is above it


def start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks since boot), or None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces: split after it.
    tail = data[data.rfind(b")") + 2 :].split()
    try:
        return int(tail[19])
    except (IndexError, ValueError):
        return None


def is_alive(pid: int, ticks: int | None) -> bool:
    """True if ``pid`` runs and (when ``ticks`` is known) started at ``ticks``."""
    if pid <= 0 or pid > PID_MAX_LIMIT:  # a bigger number (a hostile pin file) is no process
        return False
    current = start_ticks(pid)
    if current is not None:
        return ticks is None or current == ticks
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pid_alive(pid: int) -> bool:
    """True if a process ``pid`` exists (pids <= 0 never do: they address process groups)."""
    return is_alive(pid, None)


def children_of(parent: int, name: bytes | None = None) -> list[int]:
    """The pids whose parent is ``parent`` (and whose command is ``name``, if given), from
    /proc/PID/stat; empty where there is none or /proc cannot be read."""
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue  # gone meanwhile
        # The command name (field 2) is in parentheses and may contain spaces: split after it.
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) < 2 or fields[1] != str(parent).encode():
            continue
        if name is None or data[data.find(b"(") + 1 : data.rfind(b")")] == name:
            found.append(int(entry))
    return found


R = TypeVar("R", bound="Running")


class Running:
    """What starts processes (``start``, which answers the started object) and stops them
    (``stop``): as a context manager, ``with`` starts it and stops it on leaving, however the
    block ends."""

    def start(self: R) -> R:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self: R) -> R:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
