"""glidein_ext.condor: JobStatus, the one HTCondor error translation, the startd config lines."""

from __future__ import annotations

import pytest

from glidein_ext.condor import JobStatus, condor_errors, config_value, startd_node_config
from glidein_ext.errors import CondorError, UsageError


def test_job_status_numbers_are_htcondors() -> None:
    assert (JobStatus.IDLE, JobStatus.RUNNING, JobStatus.COMPLETED, JobStatus.HELD) == (1, 2, 4, 5)
    assert f"JobStatus == {JobStatus.IDLE.value}" == "JobStatus == 1"


def test_condor_errors_translates_binding_errors_once() -> None:
    with (
        pytest.raises(CondorError, match="cannot query the schedd: boom") as info,
        condor_errors("cannot query the schedd"),
    ):
        raise RuntimeError("boom")
    assert isinstance(info.value.__cause__, RuntimeError)
    # the project's own errors pass through unchanged
    with pytest.raises(UsageError, match=r"^bad$"), condor_errors("ignored"):
        raise UsageError("bad")


def test_startd_node_config() -> None:
    lines = startd_node_config("g1", "/d/condor", 4, 2048, base_config="/etc/base.config")
    assert lines[0] == "include : /etc/base.config"
    assert "LOCAL_DIR = /d/condor" in lines and "STARTD_NAME = g1" in lines
    assert "SLOT_TYPE_1_PARTITIONABLE = True" in lines and "MEMORY = 2048" in lines
    static = startd_node_config("g1", "/d", 3, 100, static_slots=True)
    assert "NUM_SLOTS = 3" in static and "SLOT_TYPE_1 = cpus=1" in static
    assert not any(line.startswith("include") for line in static)
    with pytest.raises(UsageError, match="newline"):
        config_value("a\nDAEMON_LIST = MASTER")
