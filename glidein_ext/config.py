"""Layered settings: packaged defaults < file < environment < command-line flags.

The file is TOML (``--config FILE`` or ``$GLIDEIN_EXT_CONFIG``); a key ``name`` is overridden by the
environment variable ``GLIDEIN_EXT_<NAME>`` and then by a command-line flag.  Values are checked
here, once, and a bad value raises ConfigError naming the setting and where it came from.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, Self, TypeVar

from glidein_ext.errors import ConfigError
from glidein_ext.pilot.jobtimes import (
    DEFAULT_EXPECTED_END_SOURCES,
    DEFAULT_MAX_END_SOURCES,
    parse_sources,
)

ENV_PREFIX = "GLIDEIN_EXT_"


@dataclass(frozen=True)
class Settings:
    """Every tunable of the glidein side, with its packaged default."""

    # Seconds between startd cron runs (STARTD_CRON_GLIDEINEXT_PERIOD); the heartbeat period.
    cron_period: int = 60
    # PRIORITY_FACTOR published in .pilot.ad: the owner's wish to keep this pilot.
    priority_factor: int = 0
    # Where a job's expected / maximum end come from (see glidein_ext.pilot.jobtimes).
    expected_end_sources: str = DEFAULT_EXPECTED_END_SOURCES
    max_end_sources: str = DEFAULT_MAX_END_SOURCES
    # Seconds before the deadline by which HTCondor must have vacated jobs (MAXJOBRETIREMENTTIME).
    deadline_margin: int = 60
    # MachineMaxVacateTime: seconds a job gets between the soft kill and the hard kill.
    max_vacate_time: int = 120
    # Retirement given to running jobs when draining without any deadline or ToDie (seconds).
    default_retirement: int = 7 * 24 * 3600

    def check(self) -> Settings:
        positive = ("cron_period", "max_vacate_time", "default_retirement")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"setting {name} must be at least 1, got {getattr(self, name)}")
        if self.deadline_margin < 0:
            raise ConfigError(f"setting deadline_margin must be >= 0, got {self.deadline_margin}")
        parse_sources(self.expected_end_sources, allow_max=True)
        parse_sources(self.max_end_sources, allow_max=False)
        return self


class LayeredSettings(Protocol):
    """A frozen dataclass of settings with a ``check()`` that validates it."""

    def check(self) -> Self: ...


S = TypeVar("S", bound=LayeredSettings)


def _coerce(name: str, raw: Any, kind: type, origin: str) -> Any:
    if kind is int:
        if isinstance(raw, bool):
            raise ConfigError(f"{origin}: setting {name} must be an integer, got {raw!r}")
        if isinstance(raw, int):
            return raw
        try:
            return int(str(raw).strip(), 10)
        except ValueError:
            raise ConfigError(f"{origin}: setting {name} must be an integer, got {raw!r}") from None
    return str(raw)


def load_layers(
    cls: type[S],
    env_prefix: str,
    config_file: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> S:
    """Build ``cls`` from the layers: its defaults < the TOML file (``config_file`` or
    ``$<env_prefix>CONFIG``) < ``$<env_prefix><NAME>`` < ``overrides`` (flags; None ignored)."""
    environ = os.environ if env is None else env
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    defaults = cls()
    kinds = {name: type(getattr(defaults, name)) for name in names}
    values: dict[str, Any] = {}

    path = config_file or environ.get(f"{env_prefix}CONFIG")
    if path:
        try:
            with open(path, "rb") as handle:
                data = tomllib.load(handle)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
        for key, raw in data.items():
            if key not in kinds:
                raise ConfigError(f"config file {path}: unknown setting {key!r}")
            values[key] = _coerce(key, raw, kinds[key], f"config file {path}")

    for name in names:
        env_name = f"{env_prefix}{name.upper()}"
        if env_name in environ:
            values[name] = _coerce(name, environ[env_name], kinds[name], f"${env_name}")

    for name, raw in (overrides or {}).items():
        if raw is None:
            continue
        if name not in kinds:
            raise ConfigError(f"unknown setting {name!r}")
        values[name] = _coerce(name, raw, kinds[name], f"--{name.replace('_', '-')}")

    return cls(**values).check()


def load_settings(
    config_file: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """The glidein side's Settings from the layers (``GLIDEIN_EXT_*``)."""
    return load_layers(Settings, ENV_PREFIX, config_file, env, overrides)
