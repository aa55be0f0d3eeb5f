"""The PilotMonitor's sites file (Hasham 2011 §IV-A): parsing, checking, one error naming
site+field."""

from __future__ import annotations

import asyncio
import copy
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from glidein_ext.cli.tq import tq
from glidein_ext.errors import CondorError, SitesFileError
from glidein_ext.tq.manager.monitor import SiteView, Thresholds, plan
from glidein_ext.tq.manager.sites import load_sites, parse_sites
from glidein_ext.tq.service.server import PilotMonitorService

GOOD: dict[str, Any] = {
    "defaults": {
        "pool": "cm.example.org:9618",
        "pilot": {"executable": "/opt/glidein-ext/bin/glidein-ext", "workdir": "/scratch/p"},
    },
    "sites": {
        "T2_CH_CERN": {
            "minPilots": 1,
            "maxPilots": 20,
            "minIdlePilots": 2,
            "schedd": "schedd@cern",
            "pilot": {
                "requirements": 'TARGET.Site == "CERN"',
                "args": ["--max-idle", 600],
                "environment": {"PATH": "/usr/bin:/bin"},
                "ttl": "24h",
                "cpus": 2,
                "memory": 4000,
                "disk": 20000,
            },
        },
        "T3_MIN": {"maxPilots": 3, "pool": "other:9618", "pilot": {"tqUrl": "https://tq:1/"}},
    },
}


def write(tmp_path: Path, data: Any, name: str = "sites.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_good_file(tmp_path: Path) -> None:
    cern, small = load_sites(write(tmp_path, GOOD))
    assert cern.site == "T2_CH_CERN"
    assert cern.limits == Thresholds(min_pilots=1, max_pilots=20, min_idle_pilots=2)
    assert (cern.pool, cern.schedd) == ("cm.example.org:9618", "schedd@cern")
    assert cern.executable == "/opt/glidein-ext/bin/glidein-ext"
    assert cern.workdir == "/scratch/p"
    assert cern.args == ("--max-idle", "600")
    assert cern.ttl == 86400 and (cern.cpus, cern.memory, cern.disk) == (2, 4000, 20000)
    assert cern.tq_url is None
    job = cern.policy("http://tq.example.org:8765").job
    assert job.tq_url == "http://tq.example.org:8765"
    assert (job.request_memory, job.request_disk, job.cpus, job.ttl) == (
        4000,
        20000 * 1024,
        2,
        86400,
    )
    assert small.limits == Thresholds(0, 3, 0) and small.pool == "other:9618"
    assert small.workdir == "/scratch/p" and small.tq_url == "https://tq:1/"
    assert small.policy("http://x:1").job.tq_url == "https://tq:1/"


def test_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "sites.toml"
    path.write_text(
        "[sites.T1_X]\nmaxPilots = 4\nminPilots = 2\n"
        '[sites.T1_X.pilot]\nworkdir = "/w"\nttl = 3600\n'
    )
    (site,) = load_sites(str(path))
    assert site.limits == Thresholds(2, 4, 0) and site.ttl == 3600 and site.workdir == "/w"


BAD = [
    (("maxPilots",), None, "T2_CH_CERN", "maxPilots", "is required"),
    (("maxPilots",), -1, "T2_CH_CERN", "maxPilots", ">= 0"),
    (("maxPilots",), "ten", "T2_CH_CERN", "maxPilots", "integer"),
    (("maxPilots",), True, "T2_CH_CERN", "maxPilots", "integer"),
    (("minPilots",), 21, "T2_CH_CERN", "minPilots", "<= maxPilots"),
    (("minPilots",), -2, "T2_CH_CERN", "minPilots", ">= 0"),
    (("minIdlePilots",), 30, "T2_CH_CERN", "minIdlePilots", "<= maxPilots"),
    (("minIdlePilots",), 1.5, "T2_CH_CERN", "minIdlePilots", "integer"),
    (("pool",), 9618, "T2_CH_CERN", "pool", "string"),
    (("schedd",), "", "T2_CH_CERN", "schedd", "string"),
    (("maxpilots",), 3, "T2_CH_CERN", "maxpilots", "unknown field"),
    (("pilot",), "glidein-ext", "T2_CH_CERN", "pilot", "mapping"),
    (("pilot", "workdir"), "relative/dir", "T2_CH_CERN", "pilot.workdir", "absolute"),
    (("pilot", "submitDir"), "tmp", "T2_CH_CERN", "pilot.submitDir", "absolute"),
    (("pilot", "executable"), "", "T2_CH_CERN", "pilot.executable", "non-empty"),
    (("pilot", "requirements"), 5, "T2_CH_CERN", "pilot.requirements", "string"),
    (("pilot", "args"), "--max-idle 5", "T2_CH_CERN", "pilot.args", "list"),
    (("pilot", "args"), ['say "hi"'], "T2_CH_CERN", "pilot.args", "double quote"),
    (("pilot", "environment"), ["PATH=/bin"], "T2_CH_CERN", "pilot.environment", "variable"),
    (("pilot", "environment"), {"1X": "y"}, "T2_CH_CERN", "pilot.environment", "variable"),
    (("pilot", "ttl"), "forever", "T2_CH_CERN", "pilot.ttl", "bad duration"),
    (("pilot", "ttl"), 10, "T2_CH_CERN", "pilot.ttl", "at least 60"),
    (("pilot", "cpus"), 0, "T2_CH_CERN", "pilot.cpus", ">= 1"),
    (("pilot", "memory"), "2GB", "T2_CH_CERN", "pilot.memory", "integer"),
    (("pilot", "disk"), 0, "T2_CH_CERN", "pilot.disk", ">= 1"),
    (("pilot", "tqUrl"), "tq:8765", "T2_CH_CERN", "pilot.tqUrl", "http://"),
    (("pilot", "wallTime"), 5, "T2_CH_CERN", "pilot.wallTime", "unknown field"),
]


@pytest.mark.parametrize(("where", "value", "site", "field", "reason"), BAD)
def test_each_bad_field_names_site_and_field(
    tmp_path: Path, where: tuple[str, ...], value: Any, site: str, field: str, reason: str
) -> None:
    data = copy.deepcopy(GOOD)
    target = data["sites"][site]
    for key in where[:-1]:
        target = target[key]
    if value is None:
        del target[where[-1]]
    else:
        target[where[-1]] = value
    path = write(tmp_path, data)
    with pytest.raises(SitesFileError) as info:
        load_sites(path)
    assert (info.value.site, info.value.field) == (site, field)
    message = str(info.value)
    assert "\n" not in message and reason in message
    assert message.startswith(f"{path}, site {site!r}, field {field!r}: ")


def test_missing_workdir_and_bad_site_name(tmp_path: Path) -> None:
    with pytest.raises(SitesFileError, match=r"site 'T1', field 'pilot.workdir'"):
        parse_sites({"sites": {"T1": {"maxPilots": 1}}})
    with pytest.raises(SitesFileError, match=r"site 'T 1', field 'name'"):
        parse_sites({"sites": {"T 1": {"maxPilots": 1, "pilot": {"workdir": "/w"}}}})


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ([1, 2], "mapping with a 'sites' key"),
        ({"sites": {}}, "non-empty mapping"),
        ({"sites": {"T1": {}}, "site": {}}, "unknown top-level"),
        ({"defaults": [], "sites": {"T1": {}}}, "'defaults' must be a mapping"),
    ],
)
def test_bad_top_level(data: Any, reason: str) -> None:
    with pytest.raises(SitesFileError, match=reason):
        parse_sites(data, "f.yaml")


def test_unreadable_and_unparsable(tmp_path: Path) -> None:
    with pytest.raises(SitesFileError, match="cannot read"):
        load_sites(str(tmp_path / "absent.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("sites: [unclosed\n")
    with pytest.raises(SitesFileError, match="not valid YAML") as info:
        load_sites(str(bad))
    assert "\n" not in str(info.value)


def test_cli_bad_sites_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    data = copy.deepcopy(GOOD)
    data["sites"]["T3_MIN"]["maxPilots"] = -4
    path = write(tmp_path, data)
    for args in (["monitor", "--sites", path, "--once"], ["serve", "--sites", path]):
        result = CliRunner().invoke(tq, args, env={"GLIDEIN_EXT_TQ_OPERATOR_TOKEN": "o"})
        assert result.exit_code != 0
    from glidein_ext.cli import main

    with pytest.raises(SystemExit) as info:
        main(["tq", "monitor", "--sites", path, "--once"])
    assert info.value.code == 2


def test_plan_says_why() -> None:
    limits = Thresholds(min_pilots=3, max_pilots=4, min_idle_pilots=0)
    assert plan(limits, SiteView(idle=1, busy=3)).reason.startswith("no slot")
    answer = plan(limits, SiteView(queued_groups=(2,)))
    assert answer.count == 3 and "minPilots 3" in answer.reason
    answer = plan(limits, SiteView(busy=1, queued_groups=(9,)))
    assert answer.count == 3 and "capped" in answer.reason


class _DeadManager:
    """A PilotManager whose schedd is down (the error htcondor2 raises, translated)."""

    def alive(self, batch_ids: Any) -> set[str]:
        raise CondorError("cannot locate the schedd: connection refused")

    def submit(self, site: str, count: int, job: Any) -> list[str]:
        raise AssertionError("not reached")


class _BrokenStore:
    def submissions(self, site: str) -> dict[str, str]:
        raise RuntimeError("database is locked")


def test_monitor_loop_logs_failures_and_keeps_going(caplog: pytest.LogCaptureFixture) -> None:
    """The service's loop: a failing site and a failing pass are logged, and the loop goes on."""
    (site,) = parse_sites({"sites": {"T1": {"maxPilots": 1, "pilot": {"workdir": "/w"}}}})
    service = PilotMonitorService(_BrokenStore(), [site], "http://tq:1", 0.01)  # type: ignore[arg-type]
    service.policies = [(service.policies[0][0], _DeadManager())]  # type: ignore[list-item]

    async def run_for_a_while() -> None:
        task = asyncio.create_task(service.run())
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    caplog.set_level(logging.INFO, logger="glidein_ext.tq.manager.monitor")
    asyncio.run(run_for_a_while())
    failures = [r for r in caplog.records if "PilotMonitor pass failed" in r.getMessage()]
    assert len(failures) >= 2  # retried at the next interval, never raised

    service.store = type("Empty", (), {"submissions": lambda self, site: {"1.0": "inactive"}})()
    (decision,) = service.cycle()
    assert decision.error is not None and "connection refused" in decision.error
    assert any("failed: cannot locate the schedd" in r.getMessage() for r in caplog.records)
