"""A minimal stand-in for the glideinWMS side of the custom-script protocol.

glideinWMS gives a custom script a glidein_config file, whose ADD_CONFIG_LINE_SOURCE entry names a
shell file defining add_config_line and add_condor_vars_line, whose ERROR_GEN_PATH entry names the
error_gen tool, and whose CONDOR_VARS_FILE entry names the condor vars file.  These are written here
following the documented interface (glideinWMS "Custom Scripts"), so the script's protocol can be
exercised without a factory; the HTCondor side is real in the integration test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ADD_CONFIG_LINE_SOURCE = """\
# add_config_line KEY VALUE: replace KEY's line in $glidein_config
add_config_line() {
    grep -v "^$1 " "$glidein_config" > "$glidein_config.tmp" || true
    echo "$1 $2" >> "$glidein_config.tmp"
    mv "$glidein_config.tmp" "$glidein_config"
}
# add_condor_vars_line NAME TYPE DEFAULT CONDOR_NAME REQUIRED EXPORT JOB_ENV
add_condor_vars_line() {
    echo "$1 $2 $3 $4 $5 $6 $7" >> "$condor_vars_file"
}
"""

ERROR_GEN = """\
#!/bin/sh
# Records how it was called, one argument per line, then a separator.
for arg in "$@"; do echo "$arg"; done >> "$(dirname "$0")/error_gen.calls"
echo "--" >> "$(dirname "$0")/error_gen.calls"
"""


REPO = Path(__file__).resolve().parents[2]
SETUP_SCRIPT = REPO / "scripts" / "glidein-ext-setup.sh"  # the glideinWMS custom script


def build_factory_files(out: Path) -> Path:
    """What the factory ships, built by scripts/build-glidein-bundle into ``out``:
    glidein-ext.tar.gz and glidein-ext-setup.sh."""
    subprocess.run(
        [str(REPO / "scripts" / "build-glidein-bundle"), str(out / "glidein-ext.tar.gz")],
        check=True,
        capture_output=True,
        timeout=300,
        env={**os.environ, "PYTHON": sys.executable},
    )
    return out


def make_glidein_config(base: Path, entries: dict[str, str]) -> Path:
    """Write the helpers and a glidein_config under ``base``; returns the glidein_config path."""
    helpers = base / "gwms"
    helpers.mkdir(parents=True, exist_ok=True)
    (helpers / "add_config_line.source").write_text(ADD_CONFIG_LINE_SOURCE)
    error_gen = helpers / "error_gen.sh"
    error_gen.write_text(ERROR_GEN)
    error_gen.chmod(0o755)
    (helpers / "condor_vars.lst").write_text("")
    config = base / "glidein_config"
    lines = {
        "ADD_CONFIG_LINE_SOURCE": str(helpers / "add_config_line.source"),
        "ERROR_GEN_PATH": str(error_gen),
        "CONDOR_VARS_FILE": str(helpers / "condor_vars.lst"),
        **entries,
    }
    config.write_text("".join(f"{k} {v}\n" for k, v in lines.items()))
    return config


def bundle(tmp_path: Path) -> Path:
    """The glidein_ext package of this checkout copied under ``tmp_path``, as a bundle holds it."""
    ext = tmp_path / "ext"
    shutil.copytree(
        REPO / "glidein_ext", ext / "glidein_ext", ignore=shutil.ignore_patterns("__pycache__")
    )
    return ext


def run_script(config: Path) -> subprocess.CompletedProcess[str]:
    """Run the custom script as glideinWMS does: on ``config``, in the "main" context."""
    return subprocess.run(
        ["bash", str(SETUP_SCRIPT), str(config), "main"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def setup_dirs(tmp_path: Path) -> tuple[Path, Path]:
    """A glidein's start and work directories, made under ``tmp_path``."""
    start, work = tmp_path / "start", tmp_path / "work"
    start.mkdir()
    work.mkdir()
    return start, work


def glidein(tmp_path: Path, python: str = sys.executable, **values: str) -> tuple[Path, Path, Path]:
    """A glidein's start and work directories and its glidein_config: the bundle, ``python``, the
    start and work directories, and ``values``."""
    start, work = setup_dirs(tmp_path)
    config = make_glidein_config(
        tmp_path,
        {
            "GLIDEIN_EXT_DIR": str(bundle(tmp_path)),
            "GLIDEIN_EXT_PYTHON": python,
            "GLIDEIN_START_DIR_ORIG": str(start),
            "GLIDEIN_WORK_DIR": str(work),
            **values,
        },
    )
    return start, work, config


def error_gen_calls(base: Path) -> list[list[str]]:
    path = base / "gwms" / "error_gen.calls"
    if not path.exists():
        return []
    calls: list[list[str]] = [[]]
    for line in path.read_text().splitlines():
        if line == "--":
            calls.append([])
        else:
            calls[-1].append(line)
    return [c for c in calls if c]


def config_values(config: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in config.read_text().splitlines():
        key, _, value = line.partition(" ")
        values[key] = value
    return values


def condor_vars(base: Path) -> list[list[str]]:
    return [line.split() for line in (base / "gwms" / "condor_vars.lst").read_text().splitlines()]


# --- The frontend side (glidein_ext/frontend/glidein-ext-frontend.xml) ---

FRONTEND_XML = (
    Path(__file__).resolve().parents[2] / "glidein_ext" / "frontend" / "glidein-ext-frontend.xml"
)


def frontend_match() -> ET.Element:
    """The shipped frontend <match> element."""
    return ET.parse(FRONTEND_XML).getroot()  # noqa: S314 -- our own packaged file


def frontend_match_expr(job: dict[str, Any], entry_attrs: dict[str, Any]) -> bool:
    """The shipped match_expr, evaluated the way the frontend does: a Python expression over its
    ``job`` dict and the factory entry's ``glidein`` dict (its published attributes in 'attrs')."""
    expr = frontend_match().get("match_expr", "")
    return bool(eval(expr, {}, {"job": job, "glidein": {"attrs": entry_attrs}}))  # noqa: S307


def frontend_counts_as_idle(slot: dict[str, Any], min_memory: int = 2500) -> bool:
    """glideinWMS's frontend idea of an idle glidein slot (glideinFrontendLib.getIdleCondorStatus,
    glideinWMS 3.10): unclaimed and idle, and for a partitionable slot either not yet split or with
    a CPU, more than ``min_memory`` MB and, if it has GPUs, a GPU free."""
    return (
        slot.get("State") == "Unclaimed"
        and slot.get("Activity") == "Idle"
        and (
            not slot.get("PartitionableSlot")
            or slot.get("TotalSlots") == 1
            or (
                slot.get("Cpus", 0) > 0
                and slot.get("Memory", 2501) > min_memory
                and (slot.get("TotalGpus", 0) == 0 or slot.get("Gpus", 0) > 0)
            )
        )
    )
