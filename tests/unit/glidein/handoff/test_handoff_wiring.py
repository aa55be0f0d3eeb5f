"""One configuration for every pilot (agent.config): each setting of the pilot agent reaches the
standalone pilot (``glidein-ext pilot run``) and a glidein's agent (glidein.handoff.wiring) alike,
and a token file follows one rule in both."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from glidein_ext.agent import agent as agent_module
from glidein_ext.agent.agent import AgentConfig
from glidein_ext.agent.settings import AgentSettings
from glidein_ext.cli import main
from glidein_ext.errors import PilotCheckError, UsageError
from glidein_ext.glidein.handoff import agent as handoff_agent
from glidein_ext.glidein.handoff import wiring
from tests.support.ca import write_test_ca

# Imported before a test replaces agent.PilotAgent with a recorder: the glidein's lanes subclass it.
assert issubclass(handoff_agent.GlideinAgent, object)

CA = "/etc/ssl/certs/ca-certificates.crt"  # a real PEM bundle: the client loads it
TOKEN = "s3cr3t-t0k3n"  # noqa: S105 (a test token)


def token_file(tmp_path: Path, mode: int) -> Path:
    path = tmp_path / f"token-{mode:o}"
    path.write_text(TOKEN + "\n")
    path.chmod(mode)
    return path


def settings_env(tmp_path: Path) -> dict[str, str]:
    """A value unlike the default for every setting, as $GLIDEIN_EXT_PILOT_<NAME>."""
    values: dict[str, Any] = {
        "cpus": 3,
        "memory": 777,
        "disk": 555,
        "poll_interval": 1.5,
        "poll_max": 11.0,
        "offer_wait": 2.0,
        "retry_for": 33.0,
        "min_free_mb": 1,
        "cache_max_space": "2G",
        "cache_min_threshold": "100M",
        "dht_bind": "127.0.0.2",
        "assignment": "greedy",
        "round_window": 0.3,
        "round_period": 3.0,
        "broadcast_timeout": 5.0,
        "se_delay": 0.01,
        "se_failure_rate": 0.02,
        "se_time_scale": 2.0,
        "storage_xml": "/site/storage.xml",
        "tfc_protocol": "xrootd",
        "ca_file": CA,
        "token_file": str(token_file(tmp_path, 0o600)),
    }
    names = [f.name for f in dataclasses.fields(AgentSettings)]
    assert sorted(values) == sorted(names)  # a new setting must be added here (and below)
    defaults = AgentSettings()
    for name in names:
        assert values[name] != getattr(defaults, name), name
    return {f"GLIDEIN_EXT_PILOT_{k.upper()}": str(v) for k, v in values.items()}


def standalone_config(
    tmp_path: Path,
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[AgentConfig | None, str]:
    """The AgentConfig `pilot run` builds (its agent replaced by a recorder), and its output."""
    seen: list[AgentConfig] = []

    class Recorder:
        def __init__(self, config: AgentConfig, stop: object) -> None:
            seen.append(config)

        def run(self) -> int:
            return 0

    monkeypatch.setattr(agent_module, "PilotAgent", Recorder)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = ["pilot", "run", "--tq", "https://tq.example:8765", "--site", "S"]
    with contextlib.suppress(SystemExit):
        main([*args, "--workdir", str(tmp_path / "pilot")])
    return (seen[0] if seen else None), capsys.readouterr().err


def glidein_config(tmp_path: Path, env: dict[str, str]) -> AgentConfig:
    """The AgentConfig of a glidein's agent (built, not started)."""
    full = {**os.environ, **env}
    tq = wiring.TqOptions(
        url="https://tq.example:8765",
        site="S",
        token=wiring.load_token(None, None, full),
    )
    start = tmp_path / "glidein"
    start.mkdir(exist_ok=True)
    agent = wiring.build_agent(
        tq,
        start_dir=str(start),
        name="g1",
        cpus=3,  # the glidein's own size is the cpus/memory flag of its agent
        memory_mb=777,
        lifetime=None,
        env=full,
        retiring=lambda: False,
    )
    config: AgentConfig = agent.config.agent
    return config


def test_every_setting_reaches_the_standalone_pilot_and_the_glideins_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = settings_env(tmp_path)
    settings = AgentSettings(
        **{
            f.name: type(getattr(AgentSettings(), f.name))(
                env[f"GLIDEIN_EXT_PILOT_{f.name.upper()}"]
            )
            for f in dataclasses.fields(AgentSettings)
        }
    )
    standalone, output = standalone_config(tmp_path, env, monkeypatch, capsys)
    assert standalone is not None, output
    glidein = glidein_config(tmp_path, env)
    for config in (standalone, glidein):
        for field in dataclasses.fields(AgentSettings):
            assert getattr(config.settings, field.name) == getattr(settings, field.name), field.name
        assert config.settings.max_space_bytes == 2 * 1024**3
        assert config.settings.min_threshold_bytes == 100 * 1024**2
        assert config.token == TOKEN  # token_file
        assert config.settings.ca_file == CA  # what a glidein's agent used to drop


def test_the_environment_check_and_the_tq_ca_reach_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # $GLIDEIN_EXT_TQ_CA_FILE (what `glidein-ext tq` reads) when no pilot setting names a CA
    env = {"GLIDEIN_EXT_TQ_CA_FILE": CA, "GLIDEIN_EXT_TQ_PILOT_TOKEN": TOKEN}
    standalone, output = standalone_config(tmp_path, env, monkeypatch, capsys)
    assert standalone is not None and standalone.settings.ca_file == CA, output
    assert glidein_config(tmp_path, env).settings.ca_file == CA
    # min_free_mb: the work directory's check, in both
    env["GLIDEIN_EXT_PILOT_MIN_FREE_MB"] = str(2**40)
    standalone, output = standalone_config(tmp_path, env, monkeypatch, capsys)
    assert standalone is None and "environment check failed" in output
    with pytest.raises(PilotCheckError, match="environment check failed"):
        glidein_config(tmp_path, env)


def test_a_token_file_others_may_read_is_refused_everywhere_and_left_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One rule: the glidein's wrapper used to make a 0644 token file private and use it."""
    shared = token_file(tmp_path, 0o644)
    with pytest.raises(UsageError, match=r"open to group or others \(mode 0644\)"):
        wiring.load_token(str(shared), None, {})
    assert shared.stat().st_mode & 0o777 == 0o644  # not tightened behind anyone's back
    env = {"GLIDEIN_EXT_PILOT_TOKEN_FILE": str(shared)}
    standalone, output = standalone_config(tmp_path, env, monkeypatch, capsys)
    assert standalone is None and "open to group or others (mode 0644)" in output
    private = token_file(tmp_path, 0o600)
    assert wiring.load_token(str(private), None, {}) == TOKEN


def test_the_wrappers_tq_ca_file_reaches_the_glideins_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``wrapper --tq-ca-file`` (what glidein-ext-setup.sh passes for GLIDEIN_EXT_TQ_CA_FILE)
    wins over $GLIDEIN_EXT_TQ_CA_FILE; a file that is no CA stops the agent with one line."""
    from glidein_ext.glidein import wrapper as wrapper_module

    seen: list[wiring.TqOptions] = []

    class Recorder:
        def __init__(self, cfg: Any, log: Any) -> None:
            seen.append(cfg.tq)

        def run(self) -> int:
            return 0

    ca = tmp_path / "tq-ca.pem"
    write_test_ca(ca)
    token = token_file(tmp_path, 0o600)
    start = tmp_path / "glidein"
    start.mkdir()
    args = ["wrapper", "--agent-only", "--tq", "https://tq.example:8765", "--site", "S"]
    args += ["--start-dir", str(start), "--tq-token-file", str(token)]
    monkeypatch.setattr(wrapper_module, "GlideinWrapper", Recorder)
    with pytest.raises(SystemExit) as ended:
        main([*args, "--tq-ca-file", str(ca)])
    assert ended.value.code == 0, capsys.readouterr().err
    assert seen[0].ca_file == str(ca)
    env = {**os.environ, "GLIDEIN_EXT_TQ_CA_FILE": "/nowhere/ca.pem"}
    agent = wiring.build_agent(
        seen[0],
        start_dir=str(start),
        name="g1",
        cpus=1,
        memory_mb=100,
        lifetime=None,
        env=env,
        retiring=lambda: False,
    )
    assert agent.config.agent.settings.ca_file == str(ca)
    monkeypatch.undo()
    # a file that is no CA: the agent does not start, the wrapper says why in one line
    bad = tmp_path / "not-a-ca.pem"
    bad.write_text("not a certificate\n")
    with pytest.raises(SystemExit) as ended:
        main([*args, "--tq-ca-file", str(bad)])
    assert ended.value.code == 1
    assert f"cannot use the CA file {bad}" in capsys.readouterr().err
