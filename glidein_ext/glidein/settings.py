"""The glidein side's settings (``GLIDEIN_EXT_*``), layered by ``Settings.load()``:
packaged defaults < TOML file (``--config FILE`` or ``$GLIDEIN_EXT_CONFIG``) < environment < flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from glidein_ext.config import LayeredSettings
from glidein_ext.errors import ConfigError
from glidein_ext.glidein.jobtimes import (
    DEFAULT_EXPECTED_END_SOURCES,
    DEFAULT_MAX_END_SOURCES,
    parse_sources,
)


@dataclass(frozen=True)
class Settings(LayeredSettings):
    """Every tunable of the glidein side, with its packaged default."""

    env_prefix: ClassVar[str] = "GLIDEIN_EXT_"

    # Seconds between startd cron runs (STARTD_CRON_GLIDEINEXT_PERIOD); the heartbeat period.
    cron_period: int = 60
    # PRIORITY_FACTOR published in .pilot.ad: the owner's wish to keep this pilot.
    priority_factor: int = 0
    # Where a job's expected / maximum end come from (see glidein_ext.glidein.jobtimes).
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
