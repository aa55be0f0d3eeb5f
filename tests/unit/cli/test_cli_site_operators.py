"""The site admin's commands as a user runs them: `site controller --cycles 1` exits non-zero when
its cycle failed, `site propagate --stale-after` has one default in the code, the cron's config
and the docs, and `site victims` gives its reasons in human time."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from glidein_ext.cli.site import propagate
from glidein_ext.site.propagate import DEFAULT_STALE_AFTER
from tests.support.cli import run_cli

ROOT = Path(__file__).resolve().parents[3]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=os.environ)


def test_controller_exits_non_zero_when_its_only_cycle_failed() -> None:
    done = cli(
        "site",
        "controller",
        "--owner",
        "cms",
        "--cpus",
        "1",
        "--cycles",
        "1",
        "--pool",
        "127.0.0.1:9",
    )
    assert done.returncode == 1, done
    assert "cycle failed: cannot query the collector 127.0.0.1:9" in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "glidein-ext: error: 1 of 1 cycle(s) failed (see the log above)"
    )


def test_stale_after_has_one_default_in_code_config_and_docs() -> None:
    (option,) = [p for p in propagate.params if p.name == "stale_after"]
    assert option.default == DEFAULT_STALE_AFTER
    config = (ROOT / "glidein_ext/condor_config.d/60-glidein-ext-site.config").read_text()
    assert re.findall(r"GLIDEIN_EXT_SITE_STALE_AFTER:(\d+)\)", config) == [str(DEFAULT_STALE_AFTER)]
    assert re.findall(r"GLIDEIN_EXT_SITE_STALE_AFTER \[(\d+)\]", config) == [
        str(DEFAULT_STALE_AFTER)
    ]
    docs = (ROOT / "docs/site.md").read_text()
    assert set(re.findall(r"GLIDEIN_EXT_SITE_STALE_AFTER = (\d+)", docs)) == {
        str(DEFAULT_STALE_AFTER)
    }


ADS = """Name = "slot1_1@wn1"
RemoteUser = "cms@site"
Cpus = 1
PILOT_USED_FRACTION1k = 1024
PILOT_LAST_EXP_JOB_END = 1900000000
PILOT_CAN_POSTPONE_LAST_JOB = true

Name = "slot1_2@wn1"
RemoteUser = "cms@site"
Cpus = 1
PILOT_USED_FRACTION1k = 1024
PILOT_HEARTBEAT_AGE = 4000
PILOT_HEARTBEAT_STALE = true
"""


def test_victims_reasons_are_in_human_time(tmp_path: Path) -> None:
    ads = tmp_path / "ads.txt"
    ads.write_text(ADS, encoding="utf-8")
    done = cli("site", "victims", "--cpus", "1", "--policy", "completion", "--ads", str(ads))
    assert done.returncode == 0, done.stderr
    assert "LAST_EXP_JOB_END 2030-03-17 17:46:40 UTC (in " in done.stdout
    assert "1900000000" not in done.stdout
    assert "heartbeat 1h06m old: stale" in done.stdout
