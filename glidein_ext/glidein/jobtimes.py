"""Where a running job's expected and maximum end come from (pure).

Job ads say little about run times, and what they say depends on the VO.  The order in which the
sources are tried is configuration (GLIDEIN_EXT_EXPECTED_END_SOURCES, GLIDEIN_EXT_MAX_END_SOURCES),
a comma-separated list of:

- ``Attr:s`` / ``Attr:min`` / ``Attr:h`` -- a numeric job ad attribute, a duration in seconds,
  minutes or hours from the job's start (e.g. ``AllowedJobDuration:s`` (HTCondor's own limit),
  ``MaxWallTimeMins:min`` (glideinWMS/CMS), ``EstimatedWallTimeMins:min``);
- ``todie`` -- the glidein's own end (GLIDEIN_ToDie), when known;
- ``default:SECONDS`` -- a fixed duration from the job's start;
- ``max`` -- (expected end only) the maximum end.

The first source that yields a value wins.  Then the maximum end is capped at the glidein's ToDie
(no job outlives its glidein) and the expected end at the maximum end.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from glidein_ext.errors import ConfigError

DEFAULT_EXPECTED_END_SOURCES = "EstimatedWallTimeMins:min, max"
DEFAULT_MAX_END_SOURCES = "AllowedJobDuration:s, MaxWallTimeMins:min, todie, default:172800"
FALLBACK_MAX_SECONDS = 172800

_UNITS = {"s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600}
_ATTR = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*):([a-z]+)$")
_DEFAULT = re.compile(r"^default:([0-9]+)$")


@dataclass(frozen=True)
class TimeSource:
    """One entry of a source list."""

    kind: Literal["attr", "todie", "default", "max"]
    attr: str = ""
    scale: int = 1
    seconds: int = 0

    def describe(self) -> str:
        if self.kind == "attr":
            return self.attr
        if self.kind == "default":
            return f"default:{self.seconds}"
        return self.kind


def parse_sources(text: str, *, allow_max: bool) -> tuple[TimeSource, ...]:
    """Parse a comma-separated source list; raise ConfigError naming the bad entry."""
    sources: list[TimeSource] = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        lowered = entry.lower()
        if lowered == "todie":
            sources.append(TimeSource("todie"))
        elif lowered == "max":
            if not allow_max:
                raise ConfigError("'max' is only allowed in the expected-end sources")
            sources.append(TimeSource("max"))
        elif (m := _DEFAULT.match(lowered)) is not None:
            sources.append(TimeSource("default", seconds=int(m.group(1))))
        elif (m := _ATTR.match(entry)) is not None and m.group(2) in _UNITS:
            sources.append(TimeSource("attr", attr=m.group(1), scale=_UNITS[m.group(2)]))
        else:
            raise ConfigError(
                f"bad end-time source {entry!r}: use Attr:s|min|h, todie, default:SECONDS or max"
            )
    if not sources:
        raise ConfigError("an end-time source list is empty")
    return tuple(sources)


@dataclass(frozen=True)
class JobTimes:
    """A job's resolved end times and the sources they came from."""

    expected_end: int
    max_end: int
    expected_source: str
    max_source: str


def _lookup_number(job_ad: Mapping[str, object], attr: str) -> float | None:
    value = job_ad.get(attr.lower())
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if value <= 0:
        return None
    return float(value)


def _from_source(
    source: TimeSource, job_ad: Mapping[str, object], start: int, todie: int | None
) -> int | None:
    if source.kind == "attr":
        number = _lookup_number(job_ad, source.attr)
        return None if number is None else start + int(number * source.scale)
    if source.kind == "todie":
        return todie
    if source.kind == "default":
        return start + source.seconds
    return None


def resolve_job_times(
    job_ad: Mapping[str, object],
    start: int,
    todie: int | None,
    expected_sources: tuple[TimeSource, ...],
    max_sources: tuple[TimeSource, ...],
) -> JobTimes:
    """Resolve (expected end, max end) for a job started at ``start``.

    ``job_ad`` maps lower-cased attribute names to literal values (see :mod:`jobad`).
    """
    max_end: int | None = None
    max_source = "fallback"
    for source in max_sources:
        max_end = _from_source(source, job_ad, start, todie)
        if max_end is not None:
            max_source = source.describe()
            break
    if max_end is None:
        max_end = start + FALLBACK_MAX_SECONDS
    if todie is not None and todie < max_end:
        max_end, max_source = todie, "todie"

    expected_end: int | None = None
    expected_source = "max"
    for source in expected_sources:
        if source.kind == "max":
            expected_end = max_end
        else:
            expected_end = _from_source(source, job_ad, start, todie)
        if expected_end is not None:
            expected_source = source.describe()
            break
    if expected_end is None or expected_end > max_end:
        expected_end = max_end
    return JobTimes(expected_end, max_end, expected_source, max_source)
