"""Controller plan, demand, user priorities, and the commands the site tools build (pure)."""

from __future__ import annotations

import pytest

from glidein_ext.errors import UsageError
from glidein_ext.site.controller import ControllerConfig, plan
from glidein_ext.site.demand import Demand, belongs_to, cpus_needed, fair_share_cpus
from glidein_ext.site.jobad import qedit_command
from glidein_ext.site.pilots import Pilot, pilot_from_ad
from glidein_ext.site.publish import SandboxReading
from glidein_ext.site.render import selection_table, status_table
from glidein_ext.site.userprio import parse_userprio
from glidein_ext.site.vacate import ssh_command
from glidein_ext.site.victims import Policy, choose_victims

NOW = 1_800_000_000


def p(slot: str, **kw: object) -> Pilot:
    base: dict[str, object] = {"owner": "atlas@site", "cpus": 4, "can_postpone": True}
    base.update(kw)
    return Pilot(slot=slot, **base)  # type: ignore[arg-type]


def cfg(**kw: object) -> ControllerConfig:
    return ControllerConfig(demand=Demand("cms", cpus=4), **kw)  # type: ignore[arg-type]


def test_plan_vacates_with_deadline_now_plus_grace() -> None:
    _, actions = plan([p("a", waste1k=5), p("b", waste1k=1)], {}, 4, NOW, cfg())
    assert [(a.kind, a.pilot.slot, a.deadline) for a in actions] == [("vacate", "b", NOW + 7200)]


def test_plan_is_idempotent_once_the_site_asked() -> None:
    asked = p("b", waste1k=1, site_vacate=True, site_deadline=NOW + 100)
    _, actions = plan([p("a", waste1k=5), asked], {}, 4, NOW, cfg())
    assert actions == []


def test_plan_hard_kills_after_deadline_plus_margin() -> None:
    late = p("b", site_vacate=True, site_deadline=NOW - 60)
    _, actions = plan([late], {}, 4, NOW, cfg(kill_margin=60))
    assert [(a.kind, a.pilot.slot) for a in actions] == [("hard-kill", "b")]
    _, actions = plan([late], {}, 4, NOW - 1, cfg(kill_margin=60))
    assert actions == []


def test_plan_never_evicts_the_owner_it_frees_cpus_for() -> None:
    own = p("own", owner="cms.prod@site", waste1k=0)
    _, actions = plan([own, p("other", waste1k=900)], {}, 4, NOW, cfg())
    assert [a.pilot.slot for a in actions] == ["other"]
    assert belongs_to("cms.prod@site", "cms") and belongs_to("cms@site", "cms")
    assert not belongs_to("cmsx@site", "cms")


def test_plan_kills_stale_pilots_only_when_configured() -> None:
    stale = p("s", stale=True, heartbeat_age=9999)
    assert plan([stale], {}, 0, NOW, cfg())[1] == []
    assert [a.kind for a in plan([stale], {}, 0, NOW, cfg(kill_stale=True))[1]] == ["hard-kill"]


def test_fair_share_demand_worked_example() -> None:
    # 100 CPUs, cms priority 500, atlas 1500: cms's share is 100 * (1/500) / (1/500 + 1/1500) = 75.
    prio = {"cms": 500.0, "atlas": 1500.0}
    assert fair_share_cpus("cms", 100, prio, {"atlas"}) == pytest.approx(75.0)

    def cms_needs(free: int, in_use: dict[str, int], idle: int) -> int:
        """CPUs cms's fair share asks for on 100 CPUs."""
        return cpus_needed(
            Demand("cms", fair_share=True),
            total_cpus=100,
            free_cpus=free,
            in_use=in_use,
            idle={"cms": idle},
            userprio=prio,
        )

    assert cms_needs(5, {"cms": 40, "atlas": 55}, 50) == 30  # min(50 idle, 75 - 40) - 5 free
    assert cms_needs(0, {"cms": 80, "atlas": 20}, 10) == 0
    assert (
        cpus_needed(Demand("x", cpus=7), total_cpus=0, free_cpus=0, in_use={}, idle={}, userprio={})
        == 7
    )
    with pytest.raises(ValueError):
        Demand("x", cpus=3, fair_share=True)


USERPRIO = """\
Last Priority Update: 11/25 23:16
                    Effective   Priority  Wghted Total Usage  Time Since Submitter
User Name            Priority    Factor   In Use (wghted-hrs) Last Usage  Ceiling
------------------ ------------ --------- ------ ------------ ---------- ---------
glidein@vm               523.25   1000.00      4         1.17      <now>
group_cms.prod@vm       1.5e3     1000.00      4         1.17      <now>
------------------ ------------ --------- ------ ------------ ---------- ---------
Number of users: 2                             4         1.17
"""


def test_parse_userprio_table() -> None:
    assert parse_userprio(USERPRIO) == {"glidein@vm": 523.25, "group_cms.prod@vm": 1500.0}
    assert parse_userprio("alice 10\nbob 2.5\n") == {"alice": 10.0, "bob": 2.5}
    with pytest.raises(UsageError):
        parse_userprio("nothing here\n")


def test_ssh_command_quotes_and_targets_the_jobs_schedd() -> None:
    pilot = p("slot1_1@node", global_job_id="ce.site#12.3#1700000000")
    argv = ssh_command(pilot, 1_800_007_200, remote_bin="/opt/my bin/glidein-ext")
    assert argv[:4] == ["condor_ssh_to_job", "-name", "ce.site", "12.3"]
    assert argv[4:] == [
        "'/opt/my bin/glidein-ext'",
        "site-ad",
        "write",
        ".",
        "--vacate",
        "--deadline",
        "1800007200",
    ]
    with pytest.raises(UsageError):
        ssh_command(p("slot1@n"), None)


def test_qedit_command_has_literal_values_only() -> None:
    reading = SandboxReading(
        slot="slot1_1",
        global_job_id="ce#5.0#1",
        sandbox="/x",
        pilot_ad={"USED_FRACTION1k": 10, "CAN_POSTPONE_LAST_JOB": True},
        heartbeat=NOW - 5,
    )
    argv = qedit_command(reading, NOW, 600)
    assert argv is not None and argv[:4] == ["condor_qedit", "-name", "ce", "5.0"]
    assert len(argv) % 2 == 0  # name/value pairs after the job id
    pairs = dict(zip(argv[4::2], argv[5::2]))
    assert pairs["PILOT_USED_FRACTION1k"] == "10"
    assert pairs["PILOT_CAN_POSTPONE_LAST_JOB"] == "true"
    assert pairs["PILOT_HEARTBEAT_AGE"] == "5"
    assert "PILOT_ADD_FINAL_EXP_WASTE1k" not in pairs  # undefined values are not written
    no_pilot = SandboxReading(slot="slot1_2", global_job_id="ce#5.1#1", sandbox="/y")
    assert qedit_command(no_pilot, NOW, 600) is None


def test_pilot_from_slot_ad_and_tables() -> None:
    ad = {
        "Name": "slot1_1@n",
        "RemoteUser": "cms@site",
        "Cpus": 8,
        "GlobalJobId": "ce#1.0#1",
        "PILOT_USED_FRACTION1k": 512,
        "PILOT_ADD_FINAL_EXP_WASTE1k": 256,
        "PILOT_LAST_EXP_JOB_END": NOW + 3900,
        "PILOT_CAN_POSTPONE_LAST_JOB": False,
        "PILOT_HEARTBEAT_TIME": NOW - 30,
        "PILOT_HEARTBEAT_AGE": 30,
        "PILOT_HEARTBEAT_STALE": False,
        "PILOT_AD_ERROR": "",
    }
    pilot = pilot_from_ad(ad)
    assert pilot is not None and pilot.job_id == "1.0" and pilot.draining
    assert pilot_from_ad({"Name": "slot2@n", "Cpus": 1}) is None  # not a pilot
    table = status_table([pilot], NOW)
    row = table.splitlines()[1].split()
    assert row == ["slot1_1@n", "cms@site", "8", "4.0", "25%", "1h05m", "30s", "yes"]
    text = selection_table(choose_victims([pilot], {}, 8, Policy.WASTE))
    assert text.startswith("need 8 CPUs (waste policy): 8 already draining, 0 chosen")
