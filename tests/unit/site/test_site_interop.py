"""Interoperability: slot ads fed by the paper's prototype cron (only the prefixed ``.pilot.ad``
values, none of our heartbeat attributes) are pilots to ``site status`` and ``site victims``."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from glidein_ext.errors import MissingDependencyError
from glidein_ext.site.pilots import is_pilot_slot, pilot_from_ad
from glidein_ext.site.pool import PILOT_CONSTRAINT, pilots_from_file

# condor_status -long of three slots at a site running the paper's cron: two pilots of one VO
# with different waste, and a plain (non-pilot) job.
SEED_ONLY_ADS = """\
Name = "slot1_1@wn1.example.org"
Cpus = 8
RemoteUser = "cms@example.org"
GlobalJobId = "ce1.example.org#101.0#1700000000"
PILOT_LAST_JOB_START = 1700000100
PILOT_LAST_EXP_JOB_END = 1700009000
PILOT_USED_FRACTION1k = 1024
PILOT_ADD_UNCOM_TIME1k = 300
PILOT_ADD_FINAL_EXP_WASTE1k = 700
PILOT_CAN_POSTPONE_LAST_JOB = true

Name = "slot1_2@wn1.example.org"
Cpus = 8
RemoteUser = "cms@example.org"
GlobalJobId = "ce1.example.org#102.0#1700000000"
PILOT_USED_FRACTION1k = 512
PILOT_ADD_FINAL_EXP_WASTE1k = 40
PILOT_CAN_POSTPONE_LAST_JOB = true

Name = "slot1_3@wn1.example.org"
Cpus = 4
RemoteUser = "user@example.org"
GlobalJobId = "ce1.example.org#103.0#1700000000"
"""
# Reading condor_status -long needs classad2 (the [site] extra); a worker node's bare Python 3.9
# (the bullseye chroot of scripts/py39-chroot) has none, and then the commands say so in one line.
HAVE_CLASSAD2 = importlib.util.find_spec("classad2") is not None
NEEDS_BINDINGS = (
    "needs HTCondor's Python bindings (classad2): pip install '.[site]' in a glidein-ext checkout"
)


def write_ads(tmp_path: Path) -> Path:
    path = tmp_path / "slots.ads"
    path.write_text(SEED_ONLY_ADS)
    return path


def test_seed_attributes_alone_make_a_pilot() -> None:
    assert is_pilot_slot({"Name": "s", "PILOT_USED_FRACTION1k": 0})
    assert is_pilot_slot({"Name": "s", "PILOT_CAN_POSTPONE_LAST_JOB": False})
    assert not is_pilot_slot({"Name": "s", "Cpus": 4})
    pilot = pilot_from_ad({"Name": "s", "Cpus": 2, "PILOT_ADD_FINAL_EXP_WASTE1k": 12})
    assert pilot is not None and pilot.waste1k == 12 and pilot.heartbeat_age is None
    # The collector query asks for the same slots.
    assert "PILOT_USED_FRACTION1k =!= undefined" in PILOT_CONSTRAINT


def test_pilots_from_a_seed_fed_pool(tmp_path: Path) -> None:
    if not HAVE_CLASSAD2:
        with pytest.raises(
            MissingDependencyError,
            match=re.escape("pip install '.[site]' in a glidein-ext checkout"),
        ):
            pilots_from_file(str(write_ads(tmp_path)))
        return
    pilots = pilots_from_file(str(write_ads(tmp_path)))
    assert sorted(p.slot for p in pilots) == ["slot1_1@wn1.example.org", "slot1_2@wn1.example.org"]


def test_site_victims_on_seed_only_ads(tmp_path: Path) -> None:
    ads = str(write_ads(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "glidein_ext", "site", "victims", "--cpus", "8", "--ads", ads],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if not HAVE_CLASSAD2:
        assert (proc.returncode, proc.stdout) == (1, "")
        assert proc.stderr.startswith("glidein-ext: error: this site command " + NEEDS_BINDINGS)
        assert len(proc.stderr.splitlines()) == 1
        return
    assert proc.returncode == 0, proc.stderr
    chosen = [line for line in proc.stdout.splitlines() if "slot1_" in line]
    # 8 CPUs: one pilot, the one whose drain wastes least (40 < 700); never the plain job.
    assert chosen and "slot1_2@wn1.example.org" in chosen[0], proc.stdout
    assert "slot1_3" not in proc.stdout
