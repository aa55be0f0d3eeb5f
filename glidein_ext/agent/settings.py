"""The pilot agent's settings (``GLIDEIN_EXT_PILOT_*``): the one place for its defaults.

Layered by ``AgentSettings.load()`` (:class:`glidein_ext.config.LayeredSettings`): packaged
defaults < TOML file (``--config FILE`` or ``$GLIDEIN_EXT_PILOT_CONFIG``) <
``$GLIDEIN_EXT_PILOT_<NAME>`` < ``glidein-ext pilot run`` flags.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from glidein_ext.cache.lru import cache_capacity
from glidein_ext.config import LayeredSettings
from glidein_ext.errors import CacheError, ConfigError
from glidein_ext.sched.assign import DEFAULT_METHOD, method_problem

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*", re.IGNORECASE)
# The settings that must be above 0: the waits of the agent, the distributed rounds and the SE.
_POSITIVE = (
    "poll_interval",
    "poll_max",
    "retry_for",
    "round_period",
    "broadcast_timeout",
    "se_time_scale",
)


def parse_size(text: str) -> int:
    """Bytes in ``text``: ``500M``, ``10G``, ``1.5GiB``, ``4096`` (binary units)."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ConfigError(f"not a size (like 500M, 10G or a number of bytes): {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


@dataclass(frozen=True)
class AgentSettings(LayeredSettings):
    """Every tunable of the pilot agent, with its packaged default."""

    env_prefix: ClassVar[str] = "GLIDEIN_EXT_PILOT_"

    # Resources the pilot registers (Hasham 2011 §IV-E) and offers to tasks.
    cpus: int = 1
    memory: int = 1024  # MB
    disk: int = 10240  # MB
    # Seconds between requests while no task fits; each empty answer in a row stretches the wait
    # by half, up to ``poll_max`` (an idle pilot should not keep a loaded Task Queue busy).
    poll_interval: float = 1.0
    poll_max: float = 10.0
    # Seconds an idle pilot leaves a standing offer at the Task Queue instead of asking again
    # (Lee 2003 4.2.3, the courier: an urgent task is pushed to it at once); 0: pull only.
    offer_wait: float = 0.0
    # Seconds a call to the Task Queue is retried before the pilot gives up (a TQ restart).
    retry_for: float = 300.0
    # Environment check (Hasham 2011 §IV): free MB the work directory must have.
    min_free_mb: int = 100
    # The worker-node cache (Hasham 2011 §IV.C): Max_Space per pilot and Min_Threshold kept free.
    cache_max_space: str = "10G"
    cache_min_threshold: str = "1G"
    # The site DHT and the distributed architecture (Delgado Peris 2014; docs/architectures.md):
    # where the pilot's DHT node and peer file server listen; the master's assignment method; a
    # round comes
    # ``round_window`` s after an event, or every ``round_period`` s; the TaskList broadcast's
    # timeout (s).
    dht_bind: str = "127.0.0.1"
    assignment: str = DEFAULT_METHOD
    round_window: float = 0.2
    round_period: float = 2.0
    broadcast_timeout: float = 4.0
    # The SE (Hasham 2011 Table I: d1f1 = 0.01/0, d2f2 = 0.15/0.03, d3f3 = 0.5/0.1): delay factor,
    # failure rate, seconds per unit of delay; the site's Trivial File Catalog (storage.xml or
    # storage.json; empty: an LFN's PFN is its path under the SE directory) and its protocol.
    se_delay: float = 0.0
    se_failure_rate: float = 0.0
    se_time_scale: float = 1.0
    storage_xml: str = ""
    tfc_protocol: str = "direct"
    # The Task Queue: the CA (PEM) its https:// certificate must chain to (empty: the system's CA
    # store), and a file holding the pilot's credential (private: mode 0600; empty: the token
    # comes from --token or $GLIDEIN_EXT_TQ_PILOT_TOKEN).
    ca_file: str = ""
    token_file: str = ""

    @property
    def max_space_bytes(self) -> int:
        return parse_size(self.cache_max_space)

    @property
    def min_threshold_bytes(self) -> int:
        return parse_size(self.cache_min_threshold)

    def check(self) -> AgentSettings:
        for name in ("cpus", "memory", "disk"):
            if getattr(self, name) < 1:
                raise ConfigError(f"setting {name} must be at least 1, got {getattr(self, name)}")
        if not 0 <= self.offer_wait <= 300:
            raise ConfigError(f"setting offer_wait must be in [0, 300] s, got {self.offer_wait}")
        if self.min_free_mb < 0:
            raise ConfigError(f"setting min_free_mb must be >= 0, got {self.min_free_mb}")
        for name in _POSITIVE:
            if not getattr(self, name) > 0:
                raise ConfigError(f"setting {name} must be above 0, got {getattr(self, name)}")
        problem = method_problem(self.assignment)
        if problem is not None:
            raise ConfigError(f"setting assignment: {problem}")
        if self.round_window < 0 or self.se_delay < 0 or not 0 <= self.se_failure_rate <= 1:
            raise ConfigError(
                "settings round_window and se_delay must be >= 0, se_failure_rate in [0, 1]"
            )
        try:
            cache_capacity(self.max_space_bytes, self.min_threshold_bytes)
        except CacheError as exc:
            raise ConfigError(f"settings cache_max_space/cache_min_threshold: {exc}") from None
        return self
