"""Human-readable views of `.pilot.ad` and `.site.ad` (pure text)."""

from __future__ import annotations

from collections.abc import Mapping

from glidein_ext.adfile import AdValue, format_literal
from glidein_ext.glidein import pilotad as pa
from glidein_ext.glidein import sitead as sa
from glidein_ext.timefmt import format_duration, format_relative, format_time

_TIME_KEYS = (pa.LAST_JOB_START, pa.FIRST_EXP_JOB_END, pa.LAST_EXP_JOB_END, pa.LAST_MAX_JOB_END)
_FRACTION_NOTES = {
    pa.USED_FRACTION1K: "of the pilot's CPUs in use",
    pa.ADD_UNCOM_TIME1K: "of pilot runtime lost if hard-killed now",
    pa.ADD_FINAL_EXP_WASTE1K: "of pilot runtime left idle if drained now",
}


def _explain_pilot_value(key: str, value: AdValue, now: int) -> str:
    if key in _TIME_KEYS and isinstance(value, int) and not isinstance(value, bool):
        return format_time(value, now)
    if key in _FRACTION_NOTES and isinstance(value, int):
        return f"{value / 10.24:.1f}% {_FRACTION_NOTES[key]}"
    if key == pa.PRIORITY_FACTOR:
        return "owner's wish to keep this pilot (higher is better)"
    if key == pa.CAN_POSTPONE_LAST_JOB:
        return "accepting new jobs" if value else "draining: no new jobs"
    if key == pa.CACHED_INPUT_NEEDED_MB:
        return "MB of cached input that tasks still to run will read"
    return ""


def describe_pilot_ad(path: str, values: Mapping[str, AdValue], heartbeat: int, now: int) -> str:
    lines = [
        f"{path}",
        f"  heartbeat: {format_time(heartbeat, now)}, age {format_duration(now - heartbeat)}",
    ]
    for key in pa.PILOT_AD_SCHEMA.keys:
        if key not in values:
            lines.append(f"  {key:<24} (absent)")
            continue
        value = values[key]
        lines.append(
            f"  {key:<24} {format_literal(value):<12} {_explain_pilot_value(key, value, now)}"
        )
    return "\n".join(lines)


def describe_site_ad(
    path: str,
    values: Mapping[str, AdValue] | None,
    order: sa.DrainOrder,
    now: int,
    warnings: tuple[str, ...] = (),
) -> str:
    lines = [path]
    if values is None:
        lines.append("  (no .site.ad: the site asks nothing)")
    else:
        for key in sa.SITE_AD_SCHEMA.keys:
            if key in values:
                value = values[key]
                note = (
                    format_time(value, now)
                    if key == sa.PAYLOAD_DEADLINE and isinstance(value, int)
                    else ""
                )
                lines.append(f"  {key:<18} {format_literal(value):<12} {note}")
    if order.retire:
        deadline = (
            f", deadline {format_time(order.deadline, now)}"
            if order.deadline is not None
            else ", no deadline"
        )
        lines.append(f"drain order: RETIRE (source {order.source}{deadline})")
    else:
        lines.append("drain order: none (normal work)")
    lines.extend(f"warning: {w}" for w in warnings)
    return "\n".join(lines)


__all__ = ["describe_pilot_ad", "describe_site_ad", "format_relative"]
