"""The human commands: pilot-ad show, site-ad show/write (one-line errors, non-zero exits)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from glidein_ext.adfile import read_ad, write_ad
from glidein_ext.glidein.pilotad import PILOT_AD_SCHEMA
from glidein_ext.glidein.sitead import SITE_AD_SCHEMA


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MACHINEFEATURES", "JOBFEATURES")}
    return subprocess.run(
        [sys.executable, "-m", "glidein_ext", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env=env,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert any(fragment in line for line in lines), proc.stderr
    assert len(lines) <= 3, proc.stderr  # click usage errors carry a usage line and a hint


def test_site_ad_write_vacate_with_deadline_then_cancel(tmp_path: Path) -> None:
    before = int(time.time())
    proc = cli("site-ad", "write", str(tmp_path), "--vacate", "--deadline", "2h")
    assert proc.returncode == 0, proc.stderr
    values = read_ad(str(tmp_path / ".site.ad"), SITE_AD_SCHEMA)
    assert values["VACATE_DESIRED"] is True
    deadline = values["PAYLOAD_DEADLINE"]
    assert isinstance(deadline, int) and before + 7200 <= deadline <= int(time.time()) + 7200
    show = cli("site-ad", "show", str(tmp_path))
    assert show.returncode == 0
    assert "RETIRE" in show.stdout and "site.ad" in show.stdout
    proc = cli("site-ad", "write", str(tmp_path), "--no-vacate")
    assert proc.returncode == 0
    assert read_ad(str(tmp_path / ".site.ad"), SITE_AD_SCHEMA) == {"VACATE_DESIRED": False}
    assert "none (normal work)" in cli("site-ad", "show", str(tmp_path)).stdout


def test_site_ad_write_epoch_deadline(tmp_path: Path) -> None:
    assert (
        cli("site-ad", "write", str(tmp_path), "--vacate", "--deadline", "2000000000").returncode
        == 0
    )
    assert read_ad(str(tmp_path / ".site.ad"), SITE_AD_SCHEMA)["PAYLOAD_DEADLINE"] == 2000000000


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--vacate", "--deadline", "soon"], "bad duration"),
        (["--no-vacate", "--deadline", "2h"], "--deadline only goes with --vacate"),
        ([], "say --vacate or --no-vacate"),
    ],
)
def test_site_ad_write_bad_input(tmp_path: Path, args: list[str], fragment: str) -> None:
    assert_one_line_error(cli("site-ad", "write", str(tmp_path), *args), fragment)
    assert not (tmp_path / ".site.ad").exists()


def test_site_ad_write_to_missing_dir(tmp_path: Path) -> None:
    assert_one_line_error(
        cli("site-ad", "write", str(tmp_path / "nope"), "--vacate"), "not a directory"
    )


def test_site_ad_write_keeps_the_old_file_on_bad_input(tmp_path: Path) -> None:
    write_ad(str(tmp_path / ".site.ad"), {"VACATE_DESIRED": True}, SITE_AD_SCHEMA)
    assert_one_line_error(
        cli("site-ad", "write", str(tmp_path), "--vacate", "--deadline", "x"), "bad"
    )
    assert read_ad(str(tmp_path / ".site.ad"), SITE_AD_SCHEMA) == {"VACATE_DESIRED": True}


def test_site_ad_show_bad_and_missing_files(tmp_path: Path) -> None:
    show = cli("site-ad", "show", str(tmp_path))
    assert show.returncode == 0 and "no .site.ad" in show.stdout
    (tmp_path / ".site.ad").write_text("VACATE_DESIRED = time()\n")
    assert_one_line_error(cli("site-ad", "show", str(tmp_path)), ".site.ad:1: VACATE_DESIRED")


def test_pilot_ad_show(tmp_path: Path) -> None:
    now = int(time.time())
    values = {
        "LAST_JOB_START": now - 600,
        "FIRST_EXP_JOB_END": now + 300,
        "LAST_EXP_JOB_END": now + 3630,  # "in 1h00m" while the command starts within 30 s
        "LAST_MAX_JOB_END": now + 7200,
        "USED_FRACTION1k": 512,
        "ADD_UNCOM_TIME1k": 100,
        "ADD_FINAL_EXP_WASTE1k": 200,
        "PRIORITY_FACTOR": 1,
        "CAN_POSTPONE_LAST_JOB": False,
    }
    write_ad(str(tmp_path / ".pilot.ad"), values, PILOT_AD_SCHEMA, mtime=now - 30)
    proc = cli("pilot-ad", "show", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "50.0% of the pilot's CPUs in use" in proc.stdout
    assert "draining: no new jobs" in proc.stdout
    assert "in 1h00m" in proc.stdout  # LAST_EXP_JOB_END as a human time
    assert "age 3" in proc.stdout  # heartbeat ~30 s old
    data = json.loads(cli("pilot-ad", "show", "--json", str(tmp_path)).stdout)
    assert data["values"] == values
    assert data["heartbeat"] == now - 30


@pytest.mark.parametrize(
    "content,fragment",
    [
        ("USED_FRACTION1k = 1024 * 2\n", ".pilot.ad:1: USED_FRACTION1k"),
        ("Requirements = true\n", "unknown key 'Requirements'"),
    ],
)
def test_pilot_ad_show_bad_files(tmp_path: Path, content: str, fragment: str) -> None:
    (tmp_path / ".pilot.ad").write_text(content)
    assert_one_line_error(cli("pilot-ad", "show", str(tmp_path)), fragment)


def test_pilot_ad_show_missing(tmp_path: Path) -> None:
    assert_one_line_error(cli("pilot-ad", "show", str(tmp_path)), "no such file")


def test_debug_flag_shows_the_traceback(tmp_path: Path) -> None:
    proc = cli("--debug", "pilot-ad", "show", str(tmp_path))
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr


def test_help_lists_the_commands() -> None:
    proc = cli("--help")
    assert proc.returncode == 0
    for command in ("cron", "hook", "wrapper", "pilot-ad", "site-ad"):
        assert command in proc.stdout
