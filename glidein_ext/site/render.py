"""Tables for the site admin (pure): `site status` and `site victims` (Sfiligoi 2013, "The
semi-automatic solution": the admin monitors pilots and picks victims)."""

from __future__ import annotations

from collections.abc import Sequence

from glidein_ext.site.pilots import Pilot
from glidein_ext.site.victims import Choice, Selection
from glidein_ext.timefmt import format_duration


def _pct(value1k: int | None) -> str:
    return "-" if value1k is None else f"{100 * value1k / 1024:.0f}%"


def _completion(pilot: Pilot, now: int) -> str:
    if pilot.last_exp_job_end is None:
        return "idle" if pilot.used1k == 0 else "-"
    return format_duration(max(pilot.last_exp_job_end - now, 0))


def _draining(pilot: Pilot) -> str:
    if pilot.can_postpone is False:
        return "yes"
    if pilot.site_vacate:
        return "asked"
    return "no" if pilot.can_postpone is True else "-"


def _heartbeat(pilot: Pilot) -> str:
    if pilot.heartbeat_age is None:
        return "-"
    return format_duration(pilot.heartbeat_age) + (" STALE" if pilot.stale else "")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines) + "\n"


STATUS_HEADER = ("PILOT", "OWNER", "CPUS", "USED", "WASTE", "COMPLETES IN", "HEARTBEAT", "DRAINING")


def status_table(pilots: Sequence[Pilot], now: int) -> str:
    """One row per pilot: what it is doing, what draining it now would waste, when it is done."""
    rows = []
    for p in sorted(pilots, key=lambda p: p.slot):
        used = "-" if p.used1k is None else f"{p.cpus * p.used1k / 1024:.1f}"
        rows.append(
            (
                p.slot,
                p.owner,
                str(p.cpus),
                used,
                _pct(p.waste1k),
                _completion(p, now),
                _heartbeat(p),
                _draining(p),
            )
        )
    if not rows:
        return "no pilots (no slot has PILOT_* attributes; is the site cron installed?)\n"
    return _table(STATUS_HEADER, rows)


def _choice_rows(kind: str, choices: Sequence[Choice]) -> list[tuple[str, str, str, str]]:
    return [(kind, c.pilot.slot, str(c.pilot.cpus), c.reason) for c in choices]


def selection_table(selection: Selection) -> str:
    """Victims, pilots already draining and hard-kill candidates, each with its reason."""
    rows = [
        *_choice_rows("draining", selection.draining),
        *_choice_rows("victim", selection.victims),
        *_choice_rows("hard-kill?", selection.hard_kill),
    ]
    summary = (
        f"need {selection.cpus_needed} CPUs ({selection.policy.value} policy): "
        f"{selection.cpus_draining} already draining, {selection.cpus_chosen} chosen"
        + ("" if selection.satisfied else " -- NOT ENOUGH pilots to cover the need")
        + "\n"
    )
    if not rows:
        return summary
    return summary + _table(("", "PILOT", "CPUS", "REASON"), rows)
