"""scripts/glidein-ext-setup.sh follows the glideinWMS custom-script protocol."""

from __future__ import annotations

import subprocess
from pathlib import Path

from glidein_ext.adfile import read_ad
from glidein_ext.glidein.info import load_info
from glidein_ext.glidein.pilotad import PILOT_AD_SCHEMA
from tests.support.glideinwms import (
    condor_vars,
    config_values,
    error_gen_calls,
    glidein,
    make_glidein_config,
    run_script,
    setup_dirs,
)


def test_success_initialises_the_glidein_and_exports_the_config(tmp_path: Path) -> None:
    start, work, config = glidein(
        tmp_path,
        GLIDEIN_CPUS="8",
        GLIDEIN_Name="gfactory_instance",
        GLIDEIN_EXT_PRIORITY_FACTOR="3",
        GLIDEIN_EXT_CRON_PERIOD="30",
    )
    proc = run_script(config)
    assert proc.returncode == 0, proc.stderr
    assert error_gen_calls(tmp_path) == [
        [
            "-ok",
            "glidein-ext-setup.sh",
            "GlideinExtEnabled",
            "True",
            "GlideinExtStartDir",
            str(start),
        ]
    ]
    # Sfiligoi 2013: USED_FRACTION1k = 0 before the daemons start.
    ad = read_ad(str(start / ".pilot.ad"), PILOT_AD_SCHEMA)
    assert ad["USED_FRACTION1k"] == 0
    assert ad["PRIORITY_FACTOR"] == 3
    info = load_info(str(start))
    assert (info.cpus, info.name) == (8, "gfactory_instance")
    assert (work / "condor_config.d" / "50-glidein-ext-glidein.config").is_file()
    values = config_values(config)
    assert values["GLIDEIN_EXT_START_DIR"] == str(start)
    launcher = Path(values["GLIDEIN_EXT_BIN"])
    assert launcher.is_file() and launcher.stat().st_mode & 0o022 == 0
    names = {row[0]: row for row in condor_vars(tmp_path)}
    assert names["GLIDEIN_EXT_START_DIR"][1:] == ["C", "-", "+", "Y", "N", "-"]
    assert names["GLIDEIN_EXT_CRON_PERIOD"][1] == "I"
    assert names["GLIDEIN_EXT_ENABLED"][5] == "Y"  # published in the startd ad
    # The launcher really runs glidein-ext (as the startd cron will).
    cron = subprocess.run(
        [str(launcher), "cron", "--start-dir", str(start)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert cron.returncode == 0
    assert "GLIDEIN_RetireNow = false" in cron.stdout


def test_missing_bundle_fails_validation(tmp_path: Path) -> None:
    _, work = setup_dirs(tmp_path)
    config = make_glidein_config(tmp_path, {"GLIDEIN_WORK_DIR": str(work)})
    proc = run_script(config)
    assert proc.returncode == 1
    calls = error_gen_calls(tmp_path)
    assert len(calls) == 1 and calls[0][:3] == ["-error", "glidein-ext-setup.sh", "Config"]
    assert "GLIDEIN_EXT_DIR" in calls[0][3]


def test_optional_glidein_ext_lets_the_glidein_run_on(tmp_path: Path) -> None:
    _, work = setup_dirs(tmp_path)
    config = make_glidein_config(
        tmp_path, {"GLIDEIN_WORK_DIR": str(work), "GLIDEIN_EXT_REQUIRED": "False"}
    )
    proc = run_script(config)
    assert proc.returncode == 0
    assert error_gen_calls(tmp_path) == [
        ["-ok", "glidein-ext-setup.sh", "GlideinExtEnabled", "False"]
    ]


def test_too_old_python_is_a_worker_node_error(tmp_path: Path) -> None:
    old = tmp_path / "python2"
    old.write_text("#!/bin/sh\nexit 1\n")
    old.chmod(0o755)
    start, _, config = glidein(tmp_path, python=str(old))
    proc = run_script(config)
    assert proc.returncode == 1
    assert error_gen_calls(tmp_path)[0][:3] == ["-error", "glidein-ext-setup.sh", "WN_Resource"]
    assert f"{old} is older than 3.9" in proc.stderr  # 3.9 (EL9's python3) is enough
    assert not (start / ".pilot.ad").exists()


def test_bad_cron_period_is_a_config_error(tmp_path: Path) -> None:
    _, _, config = glidein(tmp_path, GLIDEIN_EXT_CRON_PERIOD="often")
    proc = run_script(config)
    assert proc.returncode == 1
    assert error_gen_calls(tmp_path)[-1][:3] == ["-error", "glidein-ext-setup.sh", "Config"]
