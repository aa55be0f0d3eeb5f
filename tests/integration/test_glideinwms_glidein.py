"""The glideinWMS path: the factory's files are what scripts/build-glidein-bundle writes (the
tarball, untarred as glideinWMS untars it, and the custom script beside it); the custom script sets
a glidein up, then HTCondor is started the way glideinWMS's condor_startup.sh does it (its own
condor_config with the condor vars and LOCAL_CONFIG_DIR = $(WORK_DIR)/condor_config.d), not by our
wrapper.  Real HTCondor throughout; the glidein runs the bundle's code and its lib/ (click,
watchdog) with the chroot's python3.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from glidein_ext.adfile import read_ad
from glidein_ext.condor import JobStatus
from glidein_ext.glidein.info import load_info
from glidein_ext.glidein.pilotad import PILOT_AD_SCHEMA
from glidein_ext.sandbox.pool import GLIDEIN_BASE_CONFIG, CondorSandbox, wait_for
from tests.support.glideinwms import (
    build_factory_files,
    condor_vars,
    config_values,
    error_gen_calls,
    make_glidein_config,
)

pytestmark = pytest.mark.condor

REPO = Path(__file__).resolve().parents[2]


def startup_config(
    name: str, work: str, values: dict[str, str], rows: list[list[str]], todie: int
) -> str:
    """What condor_startup.sh would write, reduced to what matters here."""
    lines = [
        f"include : {GLIDEIN_BASE_CONFIG}",
        f"WORK_DIR = {work}",
        "LOCAL_DIR = $(WORK_DIR)/local",
        "LOG = $(LOCAL_DIR)/log",
        "EXECUTE = $(LOCAL_DIR)/execute",
        "SPOOL = $(LOCAL_DIR)/spool",
        "LOCK = $(LOG)",
        "RUN = $(LOG)",
        "LOCAL_CONFIG_FILE =",
        "LOCAL_CONFIG_DIR = $(WORK_DIR)/condor_config.d",
        "DAEMON_LIST = MASTER STARTD",
        "USE_SHARED_PORT = False",
        f"MASTER_NAME = {name}",
        f"STARTD_NAME = {name}",
        "NUM_CPUS = 2",
        "MEMORY = 512",
        "SLOT_TYPE_1 = cpus=100%, mem=100%, disk=100%, swap=100%",
        "NUM_SLOTS_TYPE_1 = 1",
        "SLOT_TYPE_1_PARTITIONABLE = True",
        "BENCHMARKS_JOBLIST =",
        f"GLIDEIN_ToDie = {todie}",
        f'GLIDEIN_ExtName = "{name}"',
        "STARTD_ATTRS = $(STARTD_ATTRS) GLIDEIN_ToDie GLIDEIN_ExtName",
        "MASTER.DAEMON_SHUTDOWN = STARTD_StartTime =?= 0",
    ]
    # condor vars: NAME TYPE DEFAULT CONDOR_NAME REQUIRED EXPORT JOB_ENV
    for var, kind, _default, condor_name, _req, publish, _env in rows:
        target = var if condor_name == "+" else condor_name
        value = values[var]
        lines.append(f'{target} = "{value}"' if kind == "S" else f"{target} = {value}")
        if publish == "Y":
            lines.append(f"STARTD_ATTRS = $(STARTD_ATTRS) {target}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def factory_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the factory ships: scripts/build-glidein-bundle's output directory."""
    return build_factory_files(tmp_path_factory.mktemp("factory"))


@pytest.fixture
def gwms_dirs(sandbox: CondorSandbox) -> Iterator[tuple[str, Path]]:
    name = f"gwms-{int(time.time() * 1000) % 10**8}"
    base = sandbox.make_dir(name)
    yield base, sandbox.host_path(base)


def test_custom_script_then_condor_startup(
    sandbox: CondorSandbox, gwms_dirs: tuple[str, Path], factory_files: Path
) -> None:
    base, host = gwms_dirs
    name = Path(base).name
    for sub in ("start", "work", "ext"):
        sandbox.run("mkdir", "-p", f"{base}/{sub}")
    # The factory's two files reach the glidein; glideinWMS untars the bundle into its own
    # directory (untar_options dir=...) and publishes that path as GLIDEIN_EXT_DIR.
    for file in ("glidein-ext.tar.gz", "glidein-ext-setup.sh"):
        shutil.copy(factory_files / file, host / file)
    sandbox.run("tar", "-xzf", f"{base}/glidein-ext.tar.gz", "-C", f"{base}/ext")
    # The glideinWMS side, written as the pool user would have it (paths inside the chroot).
    config_host = make_glidein_config(
        host,
        {
            "GLIDEIN_EXT_DIR": f"{base}/ext",
            "GLIDEIN_EXT_PYTHON": "python3",
            "GLIDEIN_START_DIR_ORIG": f"{base}/start",
            "GLIDEIN_WORK_DIR": f"{base}/work",
            "GLIDEIN_CPUS": "2",
            "GLIDEIN_Name": name,
            "GLIDEIN_EXT_CRON_PERIOD": "5",
        },
    )
    for path in (
        config_host,
        host / "gwms" / "add_config_line.source",
        host / "gwms" / "condor_vars.lst",
    ):
        path.write_text(path.read_text().replace(str(host), base))
    sandbox.run_root("chown", "-R", "glidein:glidein", base)

    sandbox.run("bash", f"{base}/glidein-ext-setup.sh", f"{base}/glidein_config", "main")
    assert error_gen_calls(host)[0][0] == "-ok"
    # HTCondor will run the bundle's launcher: the bundle's package and its lib/ first.
    launcher = config_values(config_host)["GLIDEIN_EXT_BIN"]
    assert launcher == f"{base}/ext/bin/glidein-ext"
    assert f"PYTHONPATH='{base}/ext':'{base}/ext/lib'" in (host / "ext/bin/glidein-ext").read_text()
    probe = "import click, glidein_ext; print(click.__file__); print(glidein_ext.__file__)"
    where = sandbox.run(
        "env", f"PYTHONPATH={base}/ext:{base}/ext/lib", "python3", "-c", probe
    ).split()
    assert where == [f"{base}/ext/lib/click/__init__.py", f"{base}/ext/glidein_ext/__init__.py"]
    values = config_values(config_host)
    todie = int(time.time()) + 3600
    condor_config = f"{base}/work/condor_config"
    sandbox.write_file(
        condor_config, startup_config(name, f"{base}/work", values, condor_vars(host), todie)
    )
    sandbox.run(
        "mkdir",
        "-p",
        f"{base}/work/local/log",
        f"{base}/work/local/execute",
        f"{base}/work/local/spool",
    )

    master = subprocess.Popen(
        [
            str(sandbox.script),
            "exec",
            "env",
            f"CONDOR_CONFIG={condor_config}",
            "condor_master",
            "-f",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        ads = wait_for(
            lambda: sandbox.status(
                f'GLIDEIN_ExtName == "{name}" && GLIDEIN_RetireNow =!= undefined'
            ),
            90,
            "the glideinWMS-style glidein's cron attributes",
        )
        assert ads[0]["GLIDEIN_RetireNow"] is False
        assert ads[0]["GLIDEIN_EXT_ENABLED"] is True  # published condor var
        # The cron passed GLIDEIN_ToDie (computed by condor_startup, after the script) on.
        wait_for(lambda: load_info(str(host / "start")).todie == todie, 20, "ToDie in glidein.json")

        submit = (
            "executable = /bin/sleep\narguments = 60\nrequest_cpus = 1\nrequest_memory = 32\n"
            "request_disk = 1024\nshould_transfer_files = NO\n+MaxWallTimeMins = 5\n"
            f'requirements = TARGET.GLIDEIN_ExtName =?= "{name}"\nqueue\n'
        )
        cluster = sandbox.submit(base, "job", submit)
        wait_for(
            lambda: (
                read_ad(str(host / "start" / ".pilot.ad"), PILOT_AD_SCHEMA)["USED_FRACTION1k"]
                == 512
            ),
            90,
            "the job hook's .pilot.ad update",
        )
        # Without our wrapper there is no file watch: the cron picks the request up at its next
        # run (glideinWMS start-up benchmarks can delay the first runs by tens of seconds, hence
        # a job long enough to be still running then: an idle retiring glidein leaves at once).
        sandbox.run("glidein-ext", "site-ad", "write", f"{base}/start", "--vacate")
        wait_for(
            lambda: any(
                a.get("GLIDEIN_RetireNow") for a in sandbox.status(f'GLIDEIN_ExtName == "{name}"')
            ),
            90,
            "GLIDEIN_RetireNow = true",
            interval=0.5,
        )
        # The job completes normally; the startd then leaves by DAEMON_SHUTDOWN.
        wait_for(
            lambda: (
                [j["JobStatus"] for j in sandbox.history(f"ClusterId == {cluster}")]
                == [JobStatus.COMPLETED]
            ),
            90,
            "the job to complete",
        )
        start_log = host / "work" / "local" / "log" / "StartLog"
        wait_for(
            lambda: "evaluated to TRUE" in start_log.read_text(errors="replace"),
            60,
            "the startd's DAEMON_SHUTDOWN",
        )
    finally:
        master.terminate()
        try:
            master.wait(timeout=30)
        except subprocess.TimeoutExpired:
            master.kill()
            master.wait(timeout=10)
