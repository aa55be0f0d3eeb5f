"""The pilot fails early and runs nothing when its environment check fails (Hasham 2011 §IV)."""

from __future__ import annotations

from pathlib import Path

import pytest

from glidein_ext.agent.checks import CheckConfig, checks_for, run_checks
from glidein_ext.agent.files import cached_lfns, fetch, keep, lfn_path
from glidein_ext.cli import main
from glidein_ext.errors import PilotCheckError, TaskQueueError


def test_checks_report_every_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SURELY_UNSET_VAR", raising=False)
    config = CheckConfig(
        workdir=tmp_path / "w",
        commands=("sh", "no-such-command-xyz"),
        env_vars=("SURELY_UNSET_VAR",),
        se_dir=tmp_path / "missing-se",
    )
    with pytest.raises(PilotCheckError) as info:
        run_checks(checks_for(config))
    text = str(info.value)
    assert "no-such-command-xyz" in text and "SURELY_UNSET_VAR" in text and "missing-se" in text
    assert "command sh" not in text


def test_pilot_run_fails_before_contacting_the_tq(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["pilot", "run", "--tq", "http://127.0.0.1:9", "--site", "S", "--token", "t"]
    args += ["--workdir", str(tmp_path / "w"), "--require-command", "no-such-command-xyz"]
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no-such-command-xyz" in err[0]


def test_files_cache_host_and_se(tmp_path: Path) -> None:
    cache, other, se = tmp_path / "c", tmp_path / "o", tmp_path / "se"
    lfn_path(other, "/a/x").parent.mkdir(parents=True)
    lfn_path(other, "/a/x").write_text("x")
    lfn_path(se, "/b/y").parent.mkdir(parents=True)
    lfn_path(se, "/b/y").write_text("y")
    assert fetch("/a/x", cache, [other], se)[1] == "host"
    assert fetch("/a/x", cache, [other], se)[1] == "cache"
    assert fetch("/b/y", cache, [], se)[1] == "se"
    with pytest.raises(TaskQueueError):
        fetch("/nowhere", cache, [other], se)
    with pytest.raises(TaskQueueError, match="unsafe"):
        lfn_path(cache, "/../etc/passwd")
    produced = tmp_path / "out.dat"
    produced.write_text("z")
    keep(produced, "/c/z", cache, se)
    assert cached_lfns(cache) == ["/a/x", "/b/y", "/c/z"]
    assert lfn_path(se, "/c/z").read_text() == "z"


def test_the_work_directory_is_made_but_not_the_path_to_it(tmp_path: Path) -> None:
    made = tmp_path / "w"
    run_checks(checks_for(CheckConfig(workdir=made, min_free_mb=1)))
    assert made.is_dir()
    deep = tmp_path / "no" / "such" / "w"
    with pytest.raises(PilotCheckError, match=r"its parent .*/no/such does not exist"):
        run_checks(checks_for(CheckConfig(workdir=deep, min_free_mb=1)))
    assert not (tmp_path / "no").exists()
