"""The glidein configuration the wrapper writes (pure rendering; HTCondor parses it in the
integration tests)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from glidein_ext.cli.wrapper import default_snippet
from glidein_ext.errors import StateError, UsageError
from glidein_ext.glidein.info import GlideinInfo, load_info, save_info
from glidein_ext.glidein.settings import Settings
from glidein_ext.glidein.wrapper import (
    GlideinWrapper,
    WrapperConfig,
    render_condor_config,
    startd_running,
)


def config(tmp_path: Path, **kw: object) -> WrapperConfig:
    base: dict[str, object] = {
        "start_dir": str(tmp_path),
        "cpus": 4,
        "memory_mb": 4096,
        "name": "g7",
        "snippet": default_snippet(),
        "settings": Settings(cron_period=7),
    }
    base.update(kw)
    return WrapperConfig(**base)  # type: ignore[arg-type]


def test_packaged_snippet_has_the_handshake_knobs() -> None:
    text = Path(default_snippet()).read_text()
    for knob in (
        "STARTD_CRON_GLIDEINEXT_ARGS = cron --start-dir $(GLIDEIN_EXT_START_DIR) --todie",
        "GLIDEINEXT_HOOK_PREPARE_JOB_ARGS",
        "GLIDEINEXT_HOOK_JOB_EXIT_ARGS",
        "START = ($(START:True)) && (GLIDEIN_RetireNow =!= True)",
        "IS_OWNER = ($(IS_OWNER:False)) || (GLIDEIN_RetireNow =?= True)",
        "MAXJOBRETIREMENTTIME",
        "STARTD.DAEMON_SHUTDOWN",
        "NumDynamicSlots",
    ):
        assert knob in text


def test_render(tmp_path: Path) -> None:
    cfg = config(tmp_path, base_config="/etc/condor/base.config", extra_config=("FOO = 1",))
    text = render_condor_config(cfg, "/bin/ge", GlideinInfo(cpus=4, start_time=10, todie=99))
    lines = text.splitlines()
    assert lines[1] == "include : /etc/condor/base.config"
    assert "NUM_CPUS = 4" in lines
    assert "SLOT_TYPE_1_PARTITIONABLE = True" in lines
    assert "GLIDEIN_ToDie = 99" in lines
    assert "GLIDEIN_EXT_CRON_PERIOD = 7" in lines
    assert "GLIDEIN_EXT_BIN = /bin/ge" in lines
    assert lines.index(f"include : {default_snippet()}") < lines.index("FOO = 1")


def test_newlines_cannot_inject_config(tmp_path: Path) -> None:
    cfg = config(tmp_path, name="g\nSTART = True")
    with pytest.raises(UsageError, match="newline"):
        render_condor_config(cfg, "/bin/ge", GlideinInfo(cpus=1, start_time=0))


def test_prepare_writes_initial_pilot_ad_and_info(tmp_path: Path) -> None:
    wrapper = GlideinWrapper(config(tmp_path, lifetime=3600), env={}, clock=lambda: 5000.0)
    path = wrapper.prepare()
    assert Path(path).is_file()
    assert "USED_FRACTION1k = 0" in (tmp_path / ".pilot.ad").read_text()
    info = load_info(str(tmp_path))
    assert (info.cpus, info.start_time, info.todie, info.name) == (4, 5000, 8600, "g7")
    launcher = tmp_path / ".glidein-ext" / "bin" / "glidein-ext"
    assert launcher.stat().st_mode & 0o777 == 0o755
    assert "-m glidein_ext" in launcher.read_text()


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"cpus": True}, "field 'cpus' must be an integer or null"),
        ({"todie": "3600"}, "field 'todie' must be an integer or null"),
        ({"priority_factor": 1.5}, "field 'priority_factor' must be an integer or null"),
        ({"cpus": None}, "cpus and start_time are required"),
    ],
)
def test_glidein_json_with_a_bad_integer_is_one_state_error(
    tmp_path: Path, fields: dict[str, object], problem: str
) -> None:
    save_info(str(tmp_path), GlideinInfo(cpus=2, start_time=100))
    path = tmp_path / ".glidein-ext" / "glidein.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "todie": None, **fields}))
    with pytest.raises(StateError, match=f"glidein.json: {problem}"):
        load_info(str(tmp_path))


def test_glidein_json_null_integers_read_as_unset(tmp_path: Path) -> None:
    save_info(str(tmp_path), GlideinInfo(cpus=2, start_time=100, todie=None, retire_time=None))
    info = load_info(str(tmp_path))
    assert (info.cpus, info.start_time, info.todie, info.retire_time) == (2, 100, None, None)


def test_prepare_rejects_bad_paths(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a directory"):
        GlideinWrapper(config(tmp_path, start_dir=str(tmp_path / "x")), env={}).prepare()
    with pytest.raises(UsageError, match="snippet"):
        GlideinWrapper(config(tmp_path, snippet=str(tmp_path / "none")), env={}).prepare()
    with pytest.raises(UsageError, match="base config"):
        GlideinWrapper(config(tmp_path, base_config=str(tmp_path / "none")), env={}).prepare()


def test_wrapper_missing_condor_master_is_one_error(tmp_path: Path) -> None:
    from glidein_ext.errors import CondorError

    wrapper = GlideinWrapper(config(tmp_path, condor_master=str(tmp_path / "no-master")), env={})
    with pytest.raises(CondorError, match="cannot start"):
        wrapper.run()


@pytest.mark.parametrize("with_psutil", [True, False])
def test_startd_seen_among_the_masters_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_psutil: bool
) -> None:
    """psutil when installed, else /proc (a worker node's bare Python has no psutil)."""
    if with_psutil:
        pytest.importorskip("psutil")
    else:
        monkeypatch.setitem(sys.modules, "psutil", None)
    sleep = shutil.which("sleep")
    assert sleep
    startd = tmp_path / "condor_startd"
    shutil.copy(sleep, startd)
    assert not startd_running(os.getpid())
    child = subprocess.Popen([str(startd), "30"])
    try:
        assert startd_running(os.getpid())  # this process plays condor_master
        assert not startd_running(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not startd_running(os.getpid())
