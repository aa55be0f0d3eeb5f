"""The job-ad channel (site/requests.py): the controller's edits, the cron's condor_q, and the
`.site.ad` writes it makes; plus how `site vacate` and the controller choose and use it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from glidein_ext.adfile import read_ad
from glidein_ext.errors import CondorError
from glidein_ext.glidein.sitead import SITE_AD_SCHEMA
from glidein_ext.glidein.siteadwrite import write_site_ad
from glidein_ext.site import pool as site_pool
from glidein_ext.site import requests as rq
from glidein_ext.site import vacate as vacate_mod
from glidein_ext.site.controller import with_job_requests
from glidein_ext.site.pilots import Pilot
from glidein_ext.site.publish import CronRun, SandboxReading, render
from glidein_ext.site.requests import SiteRequest

NOW = 1_800_000_000
PILOT_AD = {"USED_FRACTION1k": 1024}


def reading(tmp_path: Path, name: str, gjid: str | None, **kw: object) -> SandboxReading:
    sandbox = tmp_path / name
    sandbox.mkdir(exist_ok=True)
    base: dict[str, object] = {"pilot_ad": PILOT_AD}
    base.update(kw)
    return SandboxReading(slot="slot1_1", global_job_id=gjid, sandbox=str(sandbox), **base)  # type: ignore[arg-type]


def test_qedit_values_are_literals() -> None:
    assert rq.qedit_values(True, NOW) == [(rq.VACATE_ATTR, "true"), (rq.DEADLINE_ATTR, str(NOW))]
    assert rq.qedit_values(True, None)[1] == (rq.DEADLINE_ATTR, "undefined")
    assert rq.qedit_values(False, NOW) == [
        (rq.VACATE_ATTR, "false"),
        (rq.DEADLINE_ATTR, "undefined"),
    ]


def test_request_from_values_takes_only_literals_of_the_right_type() -> None:
    assert rq.request_from_values(True, NOW) == SiteRequest(True, NOW)
    assert rq.request_from_values(True, "/Expr(time()+10)/") == SiteRequest(True, None)
    assert rq.request_from_values(True, True) == SiteRequest(True, None)
    assert rq.request_from_values(True, -5) == SiteRequest(True, None)
    assert rq.request_from_values(False, NOW) == SiteRequest(False, None)
    for bad in (None, 1, "true", "/Expr(true)/"):
        assert rq.request_from_values(bad, NOW) is None


def test_query_command_is_an_argv_per_schedd() -> None:
    argv = rq.query_command("ce.site", ["12.0", "13.1"])
    assert argv[:4] == ["condor_q", "-name", "ce.site", "-allusers"]
    assert argv[-2:] == ["12.0", "13.1"]
    assert "GlobalJobId,GlideinExtVacateDesired,GlideinExtPayloadDeadline" in argv


def test_parse_query() -> None:
    text = json.dumps(
        [
            {"GlobalJobId": "ce#1.0#1", rq.VACATE_ATTR: True, rq.DEADLINE_ATTR: NOW},
            {"GlobalJobId": "ce#2.0#1"},  # no request
            {"GlobalJobId": "ce#3.0#1", rq.VACATE_ATTR: "true"},  # a string, not a literal
            {"GlobalJobId": 7, rq.VACATE_ATTR: True},
            "junk",
        ]
    )
    assert rq.parse_query(text) == {"ce#1.0#1": SiteRequest(True, NOW)}
    assert rq.parse_query("\n") == {}
    with pytest.raises(ValueError):
        rq.parse_query("Error: no such schedd")
    with pytest.raises(ValueError):
        rq.parse_query('{"GlobalJobId": "x"}')


def test_jobs_by_schedd_only_asks_about_pilots(tmp_path: Path) -> None:
    readings = [
        reading(tmp_path, "a", "ce1#1.0#1"),
        reading(tmp_path, "b", "ce2#7.3#1"),
        reading(tmp_path, "c", "ce1#2.0#1"),
        reading(tmp_path, "d", "ce1#3.0#1", pilot_ad=None),  # not a pilot
        reading(tmp_path, "e", None),
        reading(tmp_path, "f", "garbage"),
    ]
    assert rq.jobs_by_schedd(readings) == {"ce1": ["1.0", "2.0"], "ce2": ["7.3"]}


def test_plan_writes_only_what_differs(tmp_path: Path) -> None:
    same = reading(tmp_path, "same", "ce#1.0#1", site_ad={"VACATE_DESIRED": True})
    other = reading(tmp_path, "other", "ce#2.0#1", site_ad={"VACATE_DESIRED": True})
    new = reading(tmp_path, "new", "ce#3.0#1")
    untouched = reading(tmp_path, "untouched", "ce#4.0#1", site_ad={"VACATE_DESIRED": True})
    requests = {
        "ce#1.0#1": SiteRequest(True),
        "ce#2.0#1": SiteRequest(True, NOW),  # a deadline now: rewrite
        "ce#3.0#1": SiteRequest(False),  # a cancel, written too
    }
    writes = rq.plan_writes([same, other, new, untouched], requests)
    assert [(r.sandbox, req) for r, req in writes] == [
        (other.sandbox, SiteRequest(True, NOW)),
        (new.sandbox, SiteRequest(False)),
    ]


def test_apply_writes_site_ads_and_the_cron_publishes_them(tmp_path: Path) -> None:
    asked = reading(tmp_path, "asked", "ce#1.0#1")
    quiet = reading(tmp_path, "quiet", "ce#2.0#1")
    calls: list[list[str]] = []

    def runner(argv: Sequence[str], timeout: float) -> str:
        calls.append(list(argv))
        return json.dumps(
            [{"GlobalJobId": "ce#1.0#1", rq.VACATE_ATTR: True, rq.DEADLINE_ATTR: NOW}]
        )

    run = rq.apply_job_ad_requests(CronRun(NOW, 600, (asked, quiet)), runner)
    assert len(calls) == 1 and calls[0][-2:] == ["1.0", "2.0"]
    assert read_ad(f"{asked.sandbox}/.site.ad", SITE_AD_SCHEMA) == {
        "VACATE_DESIRED": True,
        "PAYLOAD_DEADLINE": NOW,
    }
    assert not Path(quiet.sandbox, ".site.ad").exists()
    assert run.readings[0].site_ad == {"VACATE_DESIRED": True, "PAYLOAD_DEADLINE": NOW}
    assert run.errors == ()
    text = render(run)
    assert "SITE_VACATE_DESIRED = true" in text and f"SITE_PAYLOAD_DEADLINE = {NOW}" in text
    # The next run finds nothing to change: no rewrite (the pilot would see a change each time).
    mtime = Path(asked.sandbox, ".site.ad").stat().st_mtime_ns
    rq.apply_job_ad_requests(run, runner)
    assert Path(asked.sandbox, ".site.ad").stat().st_mtime_ns == mtime


def test_apply_reports_a_failing_schedd_and_keeps_the_node_ad(tmp_path: Path) -> None:
    existing = reading(tmp_path, "x", "ce#1.0#1")
    write_site_ad(existing.sandbox, vacate=True)

    def failing(argv: Sequence[str], timeout: float) -> str:
        raise subprocess.CalledProcessError(1, argv[0], "Error: unknown host ce")

    def hung(argv: Sequence[str], timeout: float) -> str:
        raise subprocess.TimeoutExpired(argv[0], timeout)

    for runner, word in ((failing, "unknown host"), (hung, "timed out")):
        run = rq.apply_job_ad_requests(CronRun(NOW, 600, (existing,)), runner)
        assert len(run.errors) == 1 and word in run.errors[0], run.errors
        assert run.readings == (existing,)
        assert "GLIDEIN_EXT_SITE_CRON_OK = false" in render(run)
    assert read_ad(f"{existing.sandbox}/.site.ad", SITE_AD_SCHEMA) == {"VACATE_DESIRED": True}


def test_no_pilots_no_query(tmp_path: Path) -> None:
    def runner(argv: Sequence[str], timeout: float) -> str:
        raise AssertionError("no schedd should be asked")

    plain = reading(tmp_path, "job", "ce#1.0#1", pilot_ad=None)
    run = rq.apply_job_ad_requests(CronRun(NOW, 600, (plain,)), runner)
    assert run.errors == ()


def pilot(slot: str, gjid: str | None, **kw: object) -> Pilot:
    return Pilot(slot=slot, owner="vo@site", cpus=2, global_job_id=gjid, **kw)  # type: ignore[arg-type]


def test_controller_counts_job_ad_requests_as_asked() -> None:
    pilots = [
        pilot("a", "ce#1.0#1"),
        pilot("b", "ce#2.0#1", site_deadline=NOW + 5),
        pilot("c", "ce#3.0#1"),
        pilot("d", None),
    ]
    requests = {
        "ce#1.0#1": SiteRequest(True, NOW + 3600),
        "ce#2.0#1": SiteRequest(True),
        "ce#3.0#1": SiteRequest(False),
    }
    out = with_job_requests(pilots, requests)
    assert [(p.site_vacate, p.site_deadline) for p in out] == [
        (True, NOW + 3600),
        (True, NOW + 5),
        (False, None),
        (False, None),
    ]
    assert out[0].draining and not out[2].draining


def test_vacate_from_elsewhere_goes_through_the_job_ad(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, int | None, str | None]] = []

    def request_vacate(p: Pilot, deadline: int | None, pool: str | None = None) -> str:
        asked.append((p.slot, deadline, pool))
        return "schedd ce job 1.0"

    monkeypatch.setattr(site_pool, "request_vacate", request_vacate)
    target = pilot("slot1_1@wn", "ce#1.0#1")
    result = vacate_mod.vacate(target, NOW, (), pool="cm:9618")
    assert (result.how, result.where) == ("job-ad", "schedd ce job 1.0")
    assert asked == [("slot1_1@wn", NOW, "cm:9618")]
    with pytest.raises(CondorError, match="not on this host"):
        vacate_mod.vacate(target, NOW, (), via=vacate_mod.Via.LOCAL)
    assert len(asked) == 1
