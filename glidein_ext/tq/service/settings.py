"""Task Queue settings, layered like glidein_ext.config: defaults < TOML file < env < flags.

The file is ``--config FILE`` or ``$GLIDEIN_EXT_TQ_CONFIG``; a key ``name`` is overridden by
``$GLIDEIN_EXT_TQ_<NAME>`` and then by a command-line flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from glidein_ext.config import LayeredSettings
from glidein_ext.errors import ConfigError
from glidein_ext.tq.models import Architecture


@dataclass(frozen=True)
class TqSettings(LayeredSettings):
    """Every tunable of the Task Queue service, with its packaged default."""

    env_prefix: ClassVar[str] = "GLIDEIN_EXT_TQ_"

    # SQLAlchemy URL, or a file path for the embedded SQLite default.
    database: str = "tq.sqlite"
    host: str = "127.0.0.1"
    port: int = 8765
    # Bearer tokens: operators (submit, status, credentials; required to serve) and the shared
    # pilot token (the pilot protocol; optional: pilots may carry their own credentials instead,
    # tq.client.credentials; a shared token suits small setups).
    operator_token: str = ""
    pilot_token: str = ""
    # The grid's own tokens: a YAML file of the JWT issuers (keys, audience, roles) whose WLCG
    # Common JWT Profile tokens this Task Queue accepts beside the tokens above
    # (tq.service.api.wlcg_tokens; docs/pool.md); empty: none.
    token_issuers: str = ""
    # TLS: the server's certificate chain and private key (PEM); empty: plain HTTP.  The key may
    # be in the certificate file.  Clients verify the server (their CA file); none present theirs.
    tls_cert: str = ""
    tls_key: str = ""
    # Seconds without a heartbeat after which a pilot is lost and its task requeued.
    heartbeat_timeout: int = 120
    # Seconds between pilot heartbeats the TQ asks for (returned at registration).
    heartbeat_interval: int = 30
    # Seconds between sweeps for lapsed pilots.
    reap_interval: int = 5
    # waitForData bound (Hasham 2011 §IV-E): seconds a task may wait for an idle pilot holding its
    # data.
    wait_for_data: int = 60
    # pre-dht: the TQ tracks caches from reports; centralized: each request sends the cache list.
    # The old name of ``architecture`` (kept: a config that sets it still works).
    cache_mode: str = Architecture.PRE_DHT.value
    # The sites' architecture unless the sites file gives one (Delgado Peris 2014 §IV;
    # docs/architectures.md): pre-dht, centralized or distributed; empty: cache_mode.
    architecture: str = ""
    # Seconds a distributed site's master may stay silent before another pilot may take over
    # (it calls at least every third of it; a worker is found dead after as long).  A minute: a
    # master's heartbeat every 20 s, as often as the pilots' own (``heartbeat_interval``, 30 s)
    # and far below a collector's ad lifetime; a site without a master for a minute loses at
    # most a minute of new starts, its running tasks go on.
    master_timeout: int = 60
    # The PilotMonitor's sites file (Hasham 2011 §IV-A; glidein_ext.tq.manager.sites); empty: no
    # PilotMonitor.
    sites: str = ""
    # Seconds between PilotMonitor passes over the sites.
    monitor_interval: int = 60
    # Largest request body, bytes (413 beyond): a workflow of ~80 000 tasks fits the default.
    max_request_bytes: int = 32 * 2**20
    # The HTTP server's own limits (tq.service.httpguard): seconds a request's headers may take
    # to arrive, and then its body (the connection is closed past either: no client holds it by
    # trickling bytes); connections (or requests in service) beyond which a request is answered
    # 503 at once (kept below the open-files limit, which is raised to the hard limit at start).
    http_header_timeout: int = 10
    http_body_timeout: int = 60
    http_max_connections: int = 4000
    # A background loop (reaper, PilotMonitor) without a successful pass for its interval plus
    # this many seconds is stuck: /healthz answers 503.
    loop_stuck_after: int = 300
    # A pool of instances on one PostgreSQL database (Lee 2003): seconds between full resyncs of
    # the matcher with the database, the safety net of LISTEN/NOTIFY (tq.service.pool.notify).
    pool_resync: int = 30
    # Courier push (Lee 2003 4.2.3, tq.service.pool.courier): a runnable task of this priority or
    # more is pushed at once to an idle pilot's standing offer; a request stands at most
    # offer_max_wait s.
    courier_priority: int = 100
    offer_max_wait: int = 60
    # Stuck work (tq.service.watch.stuck): seconds between checks; a task queued while idle pilots
    # that may run it stay idle this long (keep it above wait_for_data); a busy pilot silent this
    # long (more than heartbeat_interval); an unfinished workflow with nothing running and no
    # task ended this long.
    stuck_interval: int = 30
    stuck_queued_after: int = 300
    stuck_silent_after: int = 90
    stuck_stalled_after: int = 1800

    def check(self) -> TqSettings:
        for name in (
            "heartbeat_timeout",
            "heartbeat_interval",
            "reap_interval",
            "monitor_interval",
            "max_request_bytes",
            "http_header_timeout",
            "http_body_timeout",
            "http_max_connections",
            "loop_stuck_after",
            "master_timeout",
            "pool_resync",
            "stuck_interval",
            "stuck_queued_after",
            "stuck_silent_after",
            "stuck_stalled_after",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"setting {name} must be at least 1, got {getattr(self, name)}")
        if self.stuck_silent_after <= self.heartbeat_interval:
            # a busy pilot is heard from every heartbeat_interval s: silent for less is normal
            raise ConfigError(
                f"setting stuck_silent_after ({self.stuck_silent_after} s) must be more than "
                f"heartbeat_interval ({self.heartbeat_interval} s), the pilots' heartbeat"
            )
        if self.tls_key and not self.tls_cert:
            raise ConfigError("setting tls_key needs tls_cert (the certificate of that key)")
        if self.wait_for_data < 0:
            raise ConfigError(f"setting wait_for_data must be >= 0, got {self.wait_for_data}")
        if self.offer_max_wait < 0:
            raise ConfigError(f"setting offer_max_wait must be >= 0, got {self.offer_max_wait}")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"setting port must be 0..65535, got {self.port}")
        if self.cache_mode not in {m.value for m in Architecture}:
            modes = ", ".join(m.value for m in Architecture)
            raise ConfigError(f"setting cache_mode must be one of {modes}, got {self.cache_mode!r}")
        if self.architecture and self.architecture not in {a.value for a in Architecture}:
            names = ", ".join(a.value for a in Architecture)
            raise ConfigError(
                f"setting architecture must be one of {names}, got {self.architecture!r}"
            )
        return self

    @property
    def default_architecture(self) -> Architecture:
        """``architecture``, or the old ``cache_mode`` when it is not set."""
        return Architecture(self.architecture or self.cache_mode)
