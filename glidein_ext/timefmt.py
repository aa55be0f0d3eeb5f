"""Durations and times for humans: parse `2h`, `90m`, `1d12h`, `3600` or an epoch; format ages."""

from __future__ import annotations

import re
import time

from glidein_ext.errors import UsageError

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^(?:([0-9]+)([smhdw]))+$")
_PART = re.compile(r"([0-9]+)([smhdw])")
# Bare integers at least this large are unix times, smaller ones durations in seconds.
EPOCH_THRESHOLD = 1_000_000_000


def parse_duration(text: str) -> int:
    """Seconds in ``text``: ``90``, ``90s``, ``30m``, ``2h``, ``1d12h``."""
    stripped = text.strip().lower()
    if stripped.isdigit():
        return int(stripped)
    if not stripped or _DURATION.match(stripped) is None:
        raise UsageError(f"bad duration {text!r}: use e.g. 90s, 30m, 2h, 1d12h")
    return sum(int(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(stripped))


def parse_deadline(text: str, now: int) -> int:
    """A unix time from ``text``: an epoch (>= 1e9) as is, else now + a duration."""
    stripped = text.strip()
    if stripped.isdigit() and int(stripped) >= EPOCH_THRESHOLD:
        return int(stripped)
    return now + parse_duration(stripped)


def format_duration(seconds: int) -> str:
    """``3h05m``, ``2m10s``, ``45s``, ``2d03h``."""
    seconds = abs(int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def format_relative(when: int, now: int) -> str:
    """``in 2h05m`` or ``5m10s ago`` or ``now``."""
    delta = when - now
    if delta == 0:
        return "now"
    return f"in {format_duration(delta)}" if delta > 0 else f"{format_duration(delta)} ago"


def format_time(when: int, now: int) -> str:
    """``2026-11-25 22:40:00 UTC (in 2h05m)``."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(when))
    return f"{stamp} ({format_relative(when, now)})"
