"""scripts/glidein-ext-setup.sh with a Task Queue (GLIDEIN_EXT_TQ_URL): the pilot agent starts
beside the glidein (before HTCondor) and the startd's fetch-work hooks are turned on."""

from __future__ import annotations

import os
import signal
import stat
import time
from pathlib import Path

import pytest

from glidein_ext.errors import AgentLinkError
from glidein_ext.glidein.handoff import hooks as fetchhook
from glidein_ext.glidein.handoff import link as agentlink
from tests.support.ca import write_test_ca
from tests.support.glideinwms import condor_vars, config_values, glidein, run_script

SLOT_AD = 'State = "Unclaimed"\nPartitionableSlot = true\nCpus = 2\nMemory = 2048\nDisk = 9000\n'


def wait_gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def tq_glidein(
    tmp_path: Path, url: str = "https://127.0.0.1:9", **values: str
) -> tuple[Path, Path]:
    """A glidein with a Task Queue at ``url`` (by default an https:// one nobody answers), its
    token and ``values``: its start directory and glidein_config."""
    tmp_path.mkdir(exist_ok=True)
    start, _, config = glidein(
        tmp_path,
        GLIDEIN_Site="T2_XY",
        GLIDEIN_EXT_TQ_URL=url,
        GLIDEIN_EXT_TQ_TOKEN_FILE="tq-credential",  # noqa: S106 (a file name)
        **values,
    )
    (start / "tq-credential").write_text("gxp_secret-of-this-glidein\n")
    return start, config


def test_the_agent_starts_before_htcondor_and_the_hooks_are_turned_on(tmp_path: Path) -> None:
    # nobody listens there: the lanes keep trying to register, the hooks still answer
    start, config = tq_glidein(
        tmp_path, "http://127.0.0.1:9", GLIDEIN_CPUS="2", GLIDEIN_Name="gfactory_instance"
    )
    credential = start / "tq-credential"
    credential.chmod(0o644)  # as HTCondor's file transfer leaves it: the agent tightens it
    proc = run_script(config)
    state = start / ".glidein-ext"
    pid = int((state / "agent.pid").read_text())
    try:
        assert proc.returncode == 0, proc.stderr + (state / "agent.log").read_text()
        values = config_values(config)
        assert values["GLIDEIN_EXT_HOOKS"] == str(state / "hooks")
        assert values["GLIDEIN_EXT_TQ_WORK"] == "True"
        exported = {row[0] for row in condor_vars(tmp_path)}
        assert {"GLIDEIN_EXT_HOOKS", "GLIDEIN_EXT_TQ_WORK"} <= exported
        for name in ("fetch-work", "reply-fetch", "evict-claim", "job-exit"):
            mode = (state / "hooks" / name).stat().st_mode
            assert stat.S_IMODE(mode) == 0o755, name  # HTCondor refuses writable hooks
        assert stat.S_IMODE(credential.stat().st_mode) == 0o600
        # A fetch reaches the agent, which answers only its startd's hooks (this test is none).
        with pytest.raises(AgentLinkError, match="only the glidein's condor_startd"):
            fetchhook.fetch_work(str(start), SLOT_AD)
        assert agentlink.call(str(start), {"op": "status"})["status"]["closed"] is False
    finally:
        os.kill(pid, signal.SIGTERM)
    assert wait_gone(pid), "the agent did not leave on SIGTERM"
    assert not (state / "agent" / agentlink.SOCKET_NAME).exists()


def test_the_factorys_ca_file_reaches_the_agent(tmp_path: Path) -> None:
    start, config = tq_glidein(tmp_path, GLIDEIN_EXT_TQ_CA_FILE="tq-ca.pem")
    write_test_ca(start / "tq-ca.pem")  # a real PEM: the agent loads it
    proc = run_script(config)
    state = start / ".glidein-ext"
    pid = int((state / "agent.pid").read_text())
    try:
        assert proc.returncode == 0, proc.stderr + (state / "agent.log").read_text()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert argv[argv.index(b"--tq-ca-file") + 1] == str(start / "tq-ca.pem").encode()
    finally:
        os.kill(pid, signal.SIGTERM)
    assert wait_gone(pid), "the agent did not leave on SIGTERM"


def test_a_ca_file_that_is_missing_or_no_ca_fails_the_glidein_with_one_line(
    tmp_path: Path,
) -> None:
    start, config = tq_glidein(tmp_path / "missing", GLIDEIN_EXT_TQ_CA_FILE="tq-ca.pem")
    proc = run_script(config)
    assert proc.returncode == 1
    assert f"GLIDEIN_EXT_TQ_CA_FILE: no file {start / 'tq-ca.pem'}" in proc.stderr
    assert not (start / ".glidein-ext" / "agent.pid").exists()
    # a file that is no CA: the agent (given it) refuses it, and the script says so
    start, config = tq_glidein(tmp_path / "garbage", GLIDEIN_EXT_TQ_CA_FILE="tq-ca.pem")
    (start / "tq-ca.pem").write_text("not a certificate\n")
    proc = run_script(config)
    assert proc.returncode == 1
    assert "the Task Queue agent ended" in proc.stderr
    assert f"cannot use the CA file {start / 'tq-ca.pem'}" in proc.stderr
