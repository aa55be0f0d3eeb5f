"""The site cron's output (Sfiligoi 2013, "Propagating Pilot Information") and its input parsing."""

from __future__ import annotations

import pytest

from glidein_ext.site.publish import (
    CronRun,
    SandboxReading,
    ad_name,
    merge_constraint,
    render,
    render_failure,
)
from glidein_ext.site.sandboxes import parse_global_job_id, slot_from_cmdline

GJID = "vm#36.1#1795648288"


def reading(**kw: object) -> SandboxReading:
    base: dict[str, object] = {"slot": "slot1_2", "global_job_id": GJID, "sandbox": "/x/dir_1"}
    base.update(kw)
    return SandboxReading(**base)  # type: ignore[arg-type]


def lines(text: str) -> list[str]:
    return text.splitlines()


def test_per_slot_ad_has_prefixed_values_heartbeat_and_constraint() -> None:
    r = reading(
        pilot_ad={"USED_FRACTION1k": 512, "CAN_POSTPONE_LAST_JOB": False},
        heartbeat=1000,
        site_ad={"VACATE_DESIRED": True, "PAYLOAD_DEADLINE": 9000},
    )
    out = lines(render(CronRun(now=1700, stale_after=600, readings=(r,))))
    assert out[:4] == [
        "GLIDEIN_EXT_SITE_CRON_OK = true",
        "GLIDEIN_EXT_SITE_PILOTS = 1",
        'GLIDEIN_EXT_SITE_ERROR = ""',
        "- glideinextsite",
    ]
    assert "PILOT_USED_FRACTION1k = 512" in out
    assert "PILOT_CAN_POSTPONE_LAST_JOB = false" in out
    assert "PILOT_ADD_FINAL_EXP_WASTE1k = undefined" in out  # always printed
    assert "PILOT_HEARTBEAT_AGE = 700" in out
    assert "PILOT_HEARTBEAT_STALE = true" in out
    assert "SITE_VACATE_DESIRED = true" in out and "SITE_PAYLOAD_DEADLINE = 9000" in out
    assert out[-2] == (
        'SlotMergeConstraint = substr(TARGET.Name, 0, 8) == "slot1_2@" && '
        f'TARGET.GlobalJobId =?= "{GJID}"'
    )
    assert out[-1] == "- pilot_slot1_2"


def test_fresh_heartbeat_is_not_stale_and_errors_are_sanitized_strings() -> None:
    r = reading(heartbeat=1000, pilot_ad={}, error='bad "quote"\nnewline')
    out = lines(render(CronRun(now=1600, stale_after=600, readings=(r,))))
    assert "PILOT_HEARTBEAT_STALE = false" in out
    assert "PILOT_AD_ERROR = \"bad 'quote' newline\"" in out


def test_job_without_pilot_ad_gets_undefined_values() -> None:
    out = render(CronRun(now=1, stale_after=600, readings=(reading(),)))
    assert "PILOT_USED_FRACTION1k = undefined" in out
    assert "PILOT_HEARTBEAT_AGE = undefined" in out
    assert "GLIDEIN_EXT_SITE_PILOTS = 0" in out


def test_failure_output_keeps_the_contract() -> None:
    out = lines(render_failure('boom "x"'))
    assert out == [
        "GLIDEIN_EXT_SITE_CRON_OK = false",
        "GLIDEIN_EXT_SITE_PILOTS = 0",
        "GLIDEIN_EXT_SITE_ERROR = \"boom 'x'\"",
        "- glideinextsite",
    ]


@pytest.mark.parametrize("bad", ['slot1" || true || "', "slot1@x", ""])
def test_unsafe_slot_ids_never_reach_the_constraint(bad: str) -> None:
    with pytest.raises(ValueError):
        merge_constraint(bad, None)


def test_unsafe_job_id_never_reaches_the_constraint() -> None:
    with pytest.raises(ValueError):
        merge_constraint("slot1", 'x" || true')
    assert ad_name("slot1_2") == "pilot_slot1_2"


def test_slot_from_starter_cmdline() -> None:
    argv = b"condor_starter\x00-f\x00-local-name\x00slot_type_1\x00-a\x00slot1_1\x00127.0.0.1\x00"
    assert slot_from_cmdline(argv) == "slot1_1"
    assert slot_from_cmdline(b"/usr/sbin/condor_starter\0-a\0slot3\0") == "slot3"
    assert slot_from_cmdline(b"python3\0-a\0slot1_1\0") is None  # not a starter
    assert slot_from_cmdline(b"condor_starter\0-a\0slot1;rm\0") is None
    assert slot_from_cmdline(b"") is None


def test_parse_global_job_id() -> None:
    assert parse_global_job_id(GJID) == ("vm", 36, 1)
    assert parse_global_job_id("nohash") is None
    assert parse_global_job_id("a#b.c#d") is None
