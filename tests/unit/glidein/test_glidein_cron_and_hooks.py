"""The startd cron job and the job hooks, run as HTCondor runs them: separate processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from glidein_ext.adfile import read_ad, read_ad_with_stat
from glidein_ext.glidein.info import GlideinInfo, load_info, save_info
from glidein_ext.glidein.jobtable import load_table
from glidein_ext.glidein.pilotad import PILOT_AD_SCHEMA

KNOWN_ATTRS = {
    "GLIDEIN_RetireNow",
    "GLIDEIN_RetireDeadline",
    "GLIDEIN_RetireSource",
    "GLIDEIN_RemainingUsableTime",
    "GLIDEIN_ExtRunningJobs",
    "GLIDEIN_ExtHeartbeat",
    "GLIDEIN_ExtError",
}
# A literal and nothing else: integer, boolean, undefined, or a string without quotes/backslashes.
LITERAL_LINE = re.compile(r'^([A-Za-z_]+) = (true|false|undefined|-?[0-9]+|"[^"\\\n]*")$')


def run(
    args: list[str], stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k not in ("MACHINEFEATURES", "JOBFEATURES")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "glidein_ext", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        env=full_env,
        check=False,
    )


def cron_attrs(start_dir: Path | None, env: dict[str, str] | None = None) -> dict[str, str]:
    args = ["cron"] + ([] if start_dir is None else ["--start-dir", str(start_dir)])
    proc = run(args, env=env)
    assert proc.returncode == 0, proc.stderr
    attrs: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        match = LITERAL_LINE.match(line)
        assert match, f"not a literal cron line: {line!r}"
        attrs[match.group(1)] = match.group(2)
    assert set(attrs) == KNOWN_ATTRS
    return attrs


@pytest.fixture
def glidein(tmp_path: Path) -> Path:
    now = int(time.time())
    save_info(str(tmp_path), GlideinInfo(cpus=4, start_time=now - 1000, todie=now + 3600))
    return tmp_path


def test_cron_idle_glidein(glidein: Path) -> None:
    attrs = cron_attrs(glidein)
    assert attrs["GLIDEIN_RetireNow"] == "false"
    assert attrs["GLIDEIN_RetireSource"] == '"none"'
    assert attrs["GLIDEIN_ExtError"] == '""'
    assert 3500 <= int(attrs["GLIDEIN_RemainingUsableTime"]) <= 3600
    values, st = read_ad_with_stat(str(glidein / ".pilot.ad"), PILOT_AD_SCHEMA)
    assert values["USED_FRACTION1k"] == 0
    assert int(st.st_mtime) == int(attrs["GLIDEIN_ExtHeartbeat"])


def test_cron_vacate_and_deadline(glidein: Path) -> None:
    deadline = int(time.time()) + 600
    (glidein / ".site.ad").write_text(f"VACATE_DESIRED = True\nPAYLOAD_DEADLINE = {deadline}\n")
    attrs = cron_attrs(glidein)
    assert attrs["GLIDEIN_RetireNow"] == "true"
    assert attrs["GLIDEIN_RetireDeadline"] == str(deadline)
    assert attrs["GLIDEIN_RetireSource"] == '"site.ad"'
    assert attrs["GLIDEIN_RemainingUsableTime"] == "0"
    assert read_ad(str(glidein / ".pilot.ad"), PILOT_AD_SCHEMA)["CAN_POSTPONE_LAST_JOB"] is False
    # Reversible: VACATE_DESIRED = false, then no file at all.
    (glidein / ".site.ad").write_text("VACATE_DESIRED = false\n")
    assert cron_attrs(glidein)["GLIDEIN_RetireNow"] == "false"
    (glidein / ".site.ad").unlink()
    assert cron_attrs(glidein)["GLIDEIN_RetireNow"] == "false"
    assert read_ad(str(glidein / ".pilot.ad"), PILOT_AD_SCHEMA)["CAN_POSTPONE_LAST_JOB"] is True


def test_cron_machine_features(glidein: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    mjf = tmp_path_factory.mktemp("mjf")
    shutdown = int(time.time()) + 7200
    (mjf / "shutdowntime").write_text(f"{shutdown}\n")
    attrs = cron_attrs(glidein, env={"MACHINEFEATURES": str(mjf)})
    assert attrs["GLIDEIN_RetireNow"] == "true"
    assert attrs["GLIDEIN_RetireDeadline"] == str(shutdown)
    assert attrs["GLIDEIN_RetireSource"] == '"machinefeatures"'
    (mjf / "shutdowntime").write_text("soon\n")
    attrs = cron_attrs(glidein, env={"MACHINEFEATURES": str(mjf)})
    assert attrs["GLIDEIN_RetireNow"] == "false"
    assert "shutdowntime" in attrs["GLIDEIN_ExtError"]


HOSTILE_SITE_ADS: list[tuple[str, bytes]] = [
    ("expression", b"VACATE_DESIRED = time() + 10 > 0\n"),
    ("string", b'VACATE_DESIRED = "true"\n'),
    ("unknown key", b"VACATE_DESIRED = true\nRequirements = false\n"),
    ("START injection", b"START = false\n"),
    ("NUL byte", b"VACATE_DESIRED = true\x00\n"),
    ("huge integer", b"PAYLOAD_DEADLINE = 123456789012345678901234567890\n"),
    ("quote injection", b'VACATE_DESIRED = true"\nSTART = false\n'),
    ("multi-assignment", b"VACATE_DESIRED = true; START = false\n"),
]


@pytest.mark.parametrize("name,content", HOSTILE_SITE_ADS, ids=[n for n, _ in HOSTILE_SITE_ADS])
def test_cron_hostile_site_ad_contents(glidein: Path, name: str, content: bytes) -> None:
    (glidein / ".site.ad").write_bytes(content)
    attrs = cron_attrs(glidein)  # only the known attributes, only literals
    assert attrs["GLIDEIN_RetireNow"] == "false", name  # a request we cannot read is not obeyed
    assert ".site.ad" in attrs["GLIDEIN_ExtError"]
    # .pilot.ad is still refreshed: the heartbeat goes on.
    assert attrs["GLIDEIN_ExtHeartbeat"] != "undefined"


def test_cron_crlf_site_ad_is_accepted(glidein: Path) -> None:
    (glidein / ".site.ad").write_bytes(b"# site\r\nVACATE_DESIRED = TRUE\r\n")
    attrs = cron_attrs(glidein)
    assert attrs["GLIDEIN_RetireNow"] == "true"
    assert attrs["GLIDEIN_ExtError"] == '""'


def test_cron_hostile_file_types(glidein: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    site_ad = glidein / ".site.ad"
    target = tmp_path_factory.mktemp("elsewhere") / "real"
    target.write_text("VACATE_DESIRED = true\n")
    site_ad.symlink_to(target)
    attrs = cron_attrs(glidein)
    assert attrs["GLIDEIN_RetireNow"] == "false"
    assert "symbolic link" in attrs["GLIDEIN_ExtError"]
    site_ad.unlink()
    os.mkfifo(site_ad)
    started = time.monotonic()
    attrs = cron_attrs(glidein)
    assert time.monotonic() - started < 20, "the cron must not hang on a FIFO"
    assert "FIFO" in attrs["GLIDEIN_ExtError"]
    site_ad.unlink()
    site_ad.mkdir()
    assert "directory" in cron_attrs(glidein)["GLIDEIN_ExtError"]
    site_ad.rmdir()
    site_ad.write_bytes(b"# pad\n" * 20000)
    assert "limit" in cron_attrs(glidein)["GLIDEIN_ExtError"]


def test_cron_keeps_its_contract_without_a_glidein(tmp_path: Path) -> None:
    attrs = cron_attrs(tmp_path)  # no glidein.json
    assert "glidein.json" in attrs["GLIDEIN_ExtError"]
    assert attrs["GLIDEIN_ExtHeartbeat"] == "undefined"
    attrs = cron_attrs(None)
    assert "no --start-dir" in attrs["GLIDEIN_ExtError"]
    attrs = cron_attrs(tmp_path / "does-not-exist")
    assert attrs["GLIDEIN_RetireNow"] == "false"


def test_cron_reports_an_unwritable_pilot_ad(glidein: Path) -> None:
    (glidein / ".pilot.ad").mkdir()  # os.replace of a file over a directory fails
    attrs = cron_attrs(glidein)
    assert attrs["GLIDEIN_ExtHeartbeat"] == "undefined"
    assert ".pilot.ad" in attrs["GLIDEIN_ExtError"]


def job_ad(cluster: int, proc: int, cpus: int, start: int, max_mins: int, est_mins: int) -> str:
    return (
        f'GlobalJobId = "sched#{cluster}.{proc}#1"\nClusterId = {cluster}\nProcId = {proc}\n'
        f"CpusProvisioned = {cpus}\nJobCurrentStartDate = {start}\n"
        f"MaxWallTimeMins = {max_mins}\nEstimatedWallTimeMins = {est_mins}\n"
    )


def test_hooks_track_jobs_and_update_pilot_ad_at_once(glidein: Path) -> None:
    now = int(time.time())
    proc = run(["hook", "prepare-job", "--start-dir", str(glidein)], job_ad(7, 0, 2, now, 60, 10))
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    ad = read_ad(str(glidein / ".pilot.ad"), PILOT_AD_SCHEMA)
    assert ad["USED_FRACTION1k"] == 512
    assert ad["LAST_EXP_JOB_END"] == now + 600
    # m_i = start + 60 min, capped at the glidein's GLIDEIN_ToDie (the fixture's now + 3600, which
    # is a second earlier when the clock ticked between the fixture and this test)
    todie = load_info(str(glidein)).todie
    assert todie is not None
    assert ad["LAST_MAX_JOB_END"] == min(now + 3600, todie)
    run(["hook", "prepare-job", "--start-dir", str(glidein)], job_ad(7, 1, 1, now, 30, 20))
    ad = read_ad(str(glidein / ".pilot.ad"), PILOT_AD_SCHEMA)
    assert ad["USED_FRACTION1k"] == 768
    assert ad["FIRST_EXP_JOB_END"] == now + 600
    assert ad["LAST_EXP_JOB_END"] == now + 1200
    assert len(load_table(str(glidein)).jobs) == 2
    # JOB_EXIT gets the exit reason as an argument after ours.
    proc = run(
        ["hook", "job-exit", "--start-dir", str(glidein), "exit"], job_ad(7, 0, 2, now, 60, 10)
    )
    assert proc.returncode == 0 and proc.stdout == ""
    ad = read_ad(str(glidein / ".pilot.ad"), PILOT_AD_SCHEMA)
    assert ad["USED_FRACTION1k"] == 256
    assert ad["LAST_JOB_START"] == now


def test_cron_drops_jobs_whose_starter_is_gone(glidein: Path) -> None:
    now = int(time.time())
    # The hook's parent stands for the condor_starter: a shell that exits right after the hook.
    script = f"{sys.executable} -m glidein_ext hook prepare-job --start-dir {glidein}; true"
    subprocess.run(["sh", "-c", script], input=job_ad(9, 0, 4, now, 60, 10), text=True, check=True)
    table = load_table(str(glidein))
    assert len(table.jobs) == 1
    tracked = next(iter(table.jobs.values()))
    assert tracked.starter_pid != os.getpid()
    assert read_ad(str(glidein / ".pilot.ad"), PILOT_AD_SCHEMA)["USED_FRACTION1k"] == 1024
    # The "starter" is gone, so the cron heals the table.
    attrs = cron_attrs(glidein)
    assert attrs["GLIDEIN_ExtRunningJobs"] == "0"
    assert read_ad(str(glidein / ".pilot.ad"), PILOT_AD_SCHEMA)["USED_FRACTION1k"] == 0


def test_hooks_never_fail_the_job(tmp_path: Path) -> None:
    proc = run(["hook", "prepare-job", "--start-dir", str(tmp_path)], "garbage\x00\n")
    assert proc.returncode == 0
    assert proc.stdout == ""
    assert "glidein-ext hook prepare-job:" in proc.stderr
    proc = run(
        ["hook", "job-exit", "--start-dir", str(tmp_path / "nope"), "evict"],
        "ClusterId = 1\nProcId = 0\n",
    )
    assert proc.returncode == 0
    assert proc.stdout == ""


def test_cron_adopts_the_configs_todie(glidein: Path) -> None:
    todie = int(time.time()) + 7200
    proc = run(["cron", "--start-dir", str(glidein), "--todie", str(todie)])
    assert proc.returncode == 0
    assert load_info(str(glidein)).todie == todie
    attrs = cron_attrs(glidein)
    assert 7100 <= int(attrs["GLIDEIN_RemainingUsableTime"]) <= 7200
    # GLIDEIN_ToDie undefined in the config expands to 0: ignored.
    run(["cron", "--start-dir", str(glidein), "--todie", "0"])
    assert load_info(str(glidein)).todie == todie


def test_cron_reports_a_missing_glidein_json_once(tmp_path: Path) -> None:
    proc = run(["cron", "--start-dir", str(tmp_path), "--todie", "2000000000"])
    error = next(line for line in proc.stdout.splitlines() if line.startswith("GLIDEIN_ExtError"))
    assert error.count("glidein.json") == 1
