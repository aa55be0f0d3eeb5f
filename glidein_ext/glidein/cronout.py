"""The startd cron output contract (pure).

A startd cron job prints ``Attr = value`` lines that the startd merges into its slot ads, and exits
0.  Every value printed here is a literal -- an integer, a boolean, ``undefined`` or a sanitized
string -- so nothing a pilot or a site wrote can become an expression in a slot ad.  The same
attributes are printed on every run (``undefined`` where there is no value), because the startd
keeps attributes a cron job stopped printing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from glidein_ext.glidein.sitead import DrainOrder, usable_time

RETIRE_NOW = "GLIDEIN_RetireNow"
RETIRE_DEADLINE = "GLIDEIN_RetireDeadline"
RETIRE_SOURCE = "GLIDEIN_RetireSource"
REMAINING_USABLE_TIME = "GLIDEIN_RemainingUsableTime"
RUNNING_JOBS = "GLIDEIN_ExtRunningJobs"
HEARTBEAT = "GLIDEIN_ExtHeartbeat"
ERROR = "GLIDEIN_ExtError"

MAX_STRING = 400

CronValue = Optional[Union[int, bool, str]]


def classad_string(text: str) -> str:
    """A ClassAd string literal for ``text`` that cannot be read as anything else.

    Quotes and backslashes are replaced (old-syntax ClassAds treat backslashes inconsistently),
    control characters become spaces, and the text is cut to a few hundred characters.
    """
    cleaned = "".join(" " if ord(ch) < 32 or ord(ch) == 127 else ch for ch in text)
    cleaned = cleaned.replace("\\", "/").replace('"', "'")
    if len(cleaned) > MAX_STRING:
        cleaned = cleaned[: MAX_STRING - 3] + "..."
    return f'"{cleaned}"'


def format_value(value: CronValue) -> str:
    if value is None:
        return "undefined"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return classad_string(value)


def format_cron_output(attrs: list[tuple[str, CronValue]]) -> str:
    return "".join(f"{name} = {format_value(value)}\n" for name, value in attrs)


@dataclass(frozen=True)
class CronReport:
    """What the cron publishes for one run."""

    order: DrainOrder
    now: int
    todie: int | None
    running_jobs: int | None
    heartbeat: int | None
    errors: tuple[str, ...] = ()

    def attributes(self) -> list[tuple[str, CronValue]]:
        return [
            (RETIRE_NOW, self.order.retire),
            (RETIRE_DEADLINE, self.order.deadline),
            (RETIRE_SOURCE, self.order.source),
            (REMAINING_USABLE_TIME, usable_time(self.order, self.now, self.todie)),
            (RUNNING_JOBS, self.running_jobs),
            (HEARTBEAT, self.heartbeat),
            (ERROR, "; ".join(self.errors)),
        ]

    def render(self) -> str:
        return format_cron_output(self.attributes())
