"""`site propagate --start-dir` against hostile sandboxes: it runs as root on files a pilot
wrote, so every one of these must be refused with one clear line and never followed or hung on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from glidein_ext.site.propagate import read_node, read_sandbox

GOOD = "USED_FRACTION1k = 512\nADD_FINAL_EXP_WASTE1k = 40\nCAN_POSTPONE_LAST_JOB = true\n"


def run_cli(start_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "glidein_ext", "site", "propagate", "--start-dir", str(start_dir)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_good_file_is_published(tmp_path: Path) -> None:
    (tmp_path / ".pilot.ad").write_text(GOOD)
    proc = run_cli(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "PILOT_USED_FRACTION1k = 512" in proc.stdout
    assert "PILOT_ADD_FINAL_EXP_WASTE1k = 40" in proc.stdout
    assert "PILOT_HEARTBEAT_STALE = false" in proc.stdout


def _secret(tmp_path: Path) -> Path:
    secret = tmp_path / "secret"
    secret.write_text("USED_FRACTION1k = 999\n")
    return secret


HOSTILE: dict[str, tuple[str, str]] = {
    # name: (how to make .pilot.ad, what the error says)
    "symlink": ("symlink", "symbolic link"),
    "fifo": ("fifo", "FIFO"),
    "directory": ("dir", "directory"),
    "oversized": ("big", "limit"),
    "expression": ("USED_FRACTION1k = 1 + 1\n", "integer literal"),
    "string": ('USED_FRACTION1k = "512"\n', "integer literal"),
    "unknown key": ("Requirements = true\n", "unknown key"),
    "nul byte": ("USED_FRACTION1k = 5\x0012\n", "NUL"),
    "huge integer": ("USED_FRACTION1k = 99999999999999999999\n", "64-bit"),
    "injection": ("USED_FRACTION1k = 1\nSTART = true\n", "unknown key"),
    "bool as expression": ("CAN_POSTPONE_LAST_JOB = true || false\n", "boolean"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_pilot_ad_is_refused(tmp_path: Path, case: str) -> None:
    how, expected = HOSTILE[case]
    target = tmp_path / ".pilot.ad"
    if how == "symlink":
        target.symlink_to(_secret(tmp_path))
    elif how == "fifo":
        os.mkfifo(target)
    elif how == "dir":
        target.mkdir()
    elif how == "big":
        target.write_text("# pad\n" * 20000 + GOOD)
    else:
        target.write_bytes(how.encode())
    proc = run_cli(tmp_path)
    assert proc.returncode == 1
    assert expected in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    # Nothing from the file was published, and the output still has every attribute.
    assert "PILOT_USED_FRACTION1k = undefined" in proc.stdout
    assert "PILOT_AD_ERROR = " in proc.stdout and expected in proc.stdout


def test_crlf_file_is_accepted(tmp_path: Path) -> None:
    (tmp_path / ".pilot.ad").write_bytes(GOOD.replace("\n", "\r\n").encode())
    reading = read_sandbox(str(tmp_path))
    assert reading.error == "" and reading.pilot_ad == {
        "USED_FRACTION1k": 512,
        "ADD_FINAL_EXP_WASTE1k": 40,
        "CAN_POSTPONE_LAST_JOB": True,
    }


def test_hostile_site_ad_is_refused_but_pilot_values_kept(tmp_path: Path) -> None:
    (tmp_path / ".pilot.ad").write_text(GOOD)
    (tmp_path / ".site.ad").symlink_to(_secret(tmp_path))
    reading = read_sandbox(str(tmp_path))
    assert reading.pilot_ad is not None and reading.site_ad is None
    assert "symbolic link" in reading.error


def test_execute_dir_scan_skips_symlinked_and_foreign_dirs(tmp_path: Path) -> None:
    execute = tmp_path / "execute"
    execute.mkdir()
    # A dir_<pid> for this very process (not a starter) and a symlink named like a sandbox.
    (execute / f"dir_{os.getpid()}").mkdir()
    (execute / "dir_1").symlink_to(tmp_path)
    fake_proc = tmp_path / "proc"
    (fake_proc / "4242").mkdir(parents=True)
    (fake_proc / "4242" / "cmdline").write_bytes(b"condor_starter\x00-a\x00slot1_3\x00")
    box = execute / "dir_4242"
    box.mkdir()
    (box / ".pilot.ad").write_text(GOOD)
    (box / ".job.ad").write_text('GlobalJobId = "sched#7.0#123"\nOwner = "x"\n')
    run = read_node(str(execute), now=10**10, stale_after=600, timeout=2.0, proc=str(fake_proc))
    assert [r.slot for r in run.readings] == ["slot1_3"]
    assert run.readings[0].global_job_id == "sched#7.0#123"
    assert run.readings[0].pilot_ad is not None and run.errors == ()
