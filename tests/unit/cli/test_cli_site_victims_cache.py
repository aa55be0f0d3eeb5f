"""`glidein-ext site victims --policy cache` on slot ads (``--ads``, condor_status -long text): the
pilot whose cache queued tasks need (PILOT_CACHED_INPUT_NEEDED_MB) is spared."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ADS = """Name = "slot1_1@wn1"
RemoteUser = "cms@site"
Cpus = 1
PILOT_USED_FRACTION1k = 1024
PILOT_LAST_EXP_JOB_END = 1000
PILOT_CACHED_INPUT_NEEDED_MB = 1400
PILOT_CAN_POSTPONE_LAST_JOB = true

Name = "slot1_2@wn1"
RemoteUser = "cms@site"
Cpus = 1
PILOT_USED_FRACTION1k = 1024
PILOT_LAST_EXP_JOB_END = 5000
PILOT_CACHED_INPUT_NEEDED_MB = 0
PILOT_CAN_POSTPONE_LAST_JOB = true
"""


def victims(ads: Path, policy: str) -> list[str]:
    command = [sys.executable, "-m", "glidein_ext", "site", "victims", "--cpus", "1"]
    proc = subprocess.run(
        [*command, "--policy", policy, "--ads", str(ads)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("victim")]


def test_cache_policy_spares_the_pilot_holding_needed_input(tmp_path: Path) -> None:
    ads = tmp_path / "ads.txt"
    ads.write_text(ADS, encoding="utf-8")
    assert victims(ads, "completion") == ["slot1_1@wn1"]  # its job ends first
    assert victims(ads, "cache") == ["slot1_2@wn1"]  # the other holds 1,400 MB queued tasks need
