"""Layered settings and human durations."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from glidein_ext.errors import ConfigError, UsageError
from glidein_ext.glidein.settings import Settings
from glidein_ext.timefmt import format_duration, format_relative, parse_deadline, parse_duration

# A settings file is TOML: tomllib from Python 3.11, else the tomli package if installed; a worker
# node's bare 3.9 (scripts/py39-chroot) has neither and refuses the file with this one error.
HAVE_TOML = sys.version_info >= (3, 11) or importlib.util.find_spec("tomli") is not None
NO_TOML = "TOML needs Python 3.11\\+ or the tomli package"


def test_layers_defaults_file_env_flags(tmp_path: Path) -> None:
    assert Settings.load(env={}) == Settings()
    assert Settings.load(env={"GLIDEIN_EXT_CRON_PERIOD": "20"}).cron_period == 20
    cfg = tmp_path / "g.toml"
    cfg.write_text("cron_period = 30\npriority_factor = 2\n")
    if not HAVE_TOML:
        with pytest.raises(ConfigError, match=NO_TOML):
            Settings.load(str(cfg), env={})
        return
    assert Settings.load(str(cfg), env={}).cron_period == 30
    env = {"GLIDEIN_EXT_CRON_PERIOD": "20"}
    merged = Settings.load(str(cfg), env=env)
    assert (merged.cron_period, merged.priority_factor) == (20, 2)
    flagged = Settings.load(
        str(cfg), env=env, overrides={"cron_period": 10, "priority_factor": None}
    )
    assert (flagged.cron_period, flagged.priority_factor) == (10, 2)
    assert Settings.load(env={"GLIDEIN_EXT_CONFIG": str(cfg)}).cron_period == 30


@pytest.mark.parametrize(
    "content,env,fragment",
    [
        ("cron_period = 'often'\n", {}, "must be an integer"),
        ("bogus = 1\n", {}, "unknown setting 'bogus'"),
        ("cron_period = \n", {}, "not valid TOML"),
        ("", {"GLIDEIN_EXT_CRON_PERIOD": "0"}, "at least 1"),
        ("", {"GLIDEIN_EXT_MAX_END_SOURCES": "max"}, "only allowed"),
        ("", {"GLIDEIN_EXT_DEADLINE_MARGIN": "-1"}, "deadline_margin"),
    ],
)
def test_bad_settings(tmp_path: Path, content: str, env: dict[str, str], fragment: str) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text(content)
    if content and not HAVE_TOML:
        fragment = NO_TOML
    with pytest.raises(ConfigError, match=fragment):
        Settings.load(str(cfg) if content else None, env=env)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        Settings.load(str(tmp_path / "none.toml"), env={})


def test_durations() -> None:
    assert parse_duration("90") == 90
    assert parse_duration("2h") == 7200
    assert parse_duration("1d12h") == 129600
    assert parse_duration("30M") == 1800
    for bad in ("", "h", "2 hours", "-5", "1.5h"):
        with pytest.raises(UsageError):
            parse_duration(bad)
    assert parse_deadline("2h", now=100) == 7300
    assert parse_deadline("1800000000", now=100) == 1800000000
    assert format_duration(3900) == "1h05m"
    assert format_duration(90061) == "1d01h"
    assert format_relative(160, 100) == "in 1m00s"
    assert format_relative(40, 100) == "1m00s ago"
    assert format_relative(5, 5) == "now"
