"""The PilotMonitor's sites file (Hasham 2011 §IV-A): per-site thresholds and how pilots are
submitted.

YAML (or TOML when the name ends in ``.toml``)::

    defaults:                 # optional; merged under every site (``pilot`` key by key)
      pool: cm.example.org:9618
      pilot: {executable: /opt/glidein-ext/bin/glidein-ext, workdir: /scratch/pilots}
    sites:
      T2_CH_CERN:
        minPilots: 1
        maxPilots: 20
        minIdlePilots: 2
        pool: ...            # collector host[:port]; default: the local HTCondor configuration
        schedd: ...          # schedd name; default: the pool's (only) schedd
        schedds:             # or several schedds, each with its own limit: pilots
          - {name: schedd_a@ce1.example.org, maxPilots: 10}      # balanced by load, a
          - {name: schedd_b@ce2.example.org, maxPilots: 5, pool: ...}  # failing one backed off
        pilot:
          workdir: /scratch/pilots    # required, absolute, on the execute side
          executable: glidein-ext     # the `glidein-ext` command on the worker node
          submitDir: /                # the job's initialdir on the submit side
          requirements: 'true'        # the pilot job's HTCondor Requirements
          args: [--max-idle, '600']   # appended to `glidein-ext pilot run ...`
          environment: {PATH: /usr/bin:/bin}
          ttl: 24h                    # pilot life (`--ttl`); the job is removed 10 min later
          cpus: 1                     # request_cpus and `--cpus`
          memory: 1024                # MB: request_memory and `--memory`
          disk: 10240                 # MB: request_disk and `--disk`
          tqUrl: http://tq:8765       # default: the URL the service listens on
          collector: vo-cm:9618       # real glideins: `glidein-ext wrapper --tq` jobs whose
                                      # startd joins this (the VO's) pool; none: `pilot run`
          baseConfig: /etc/condor/glidein-base.config  # the glidein's base HTCondor config

``load_sites`` checks everything and raises one SitesFileError naming the site and the field; the
file is read bounded (``tq.datafile``: size, UTF-8, YAML without aliases, nesting depth).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from glidein_ext.errors import SitesFileError, UsageError
from glidein_ext.timefmt import parse_duration
from glidein_ext.tq.client.limits import shorten
from glidein_ext.tq.datafile import load_file
from glidein_ext.tq.manager.monitor import PilotSubmitter, SitePolicy, Thresholds
from glidein_ext.tq.manager.pilot_submit import CredentialIssuer, PilotJob, PilotManager
from glidein_ext.tq.manager.schedds import ScheddLimit, submitter_for
from glidein_ext.tq.models import PilotInfo

MAX_FILE_BYTES = 2**20
_SITE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
_SITE_KEYS = {
    "minPilots",
    "maxPilots",
    "minIdlePilots",
    "pool",
    "schedd",
    "schedds",
    "pilot",
    "architecture",
}
_ARCHITECTURES = (
    "pre-dht",
    "centralized",
    "distributed",
)  # Delgado Peris 2014 §IV; tq.models.Architecture
_PILOT_KEYS = {
    "workdir",
    "executable",
    "submitDir",
    "requirements",
    "args",
    "environment",
    "ttl",
    "cpus",
    "memory",
    "disk",
    "tqUrl",
    "collector",
    "baseConfig",
}


@dataclass(frozen=True)
class SiteConfig:
    """One site of the sites file, checked."""

    site: str
    limits: Thresholds
    workdir: str
    pool: str | None = None
    schedd: str | None = None
    executable: str = "glidein-ext"
    submit_dir: str = "/"
    requirements: str = "true"
    args: tuple[str, ...] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    ttl: int | None = None
    cpus: int = 1
    memory: int = 1024
    disk: int = 10240
    tq_url: str | None = None
    architecture: str | None = None  # Delgado Peris 2014 §IV: pre-dht, centralized, distributed
    schedds: tuple[ScheddLimit, ...] = ()  # several schedds (tq.manager.schedds); () : ``schedd``
    collector: str | None = None  # real glideins join this pool
    base_config: str | None = None

    def policy(self, default_tq_url: str) -> SitePolicy:
        """The SitePolicy the PilotMonitor runs; ``default_tq_url`` unless the file gives one."""
        job = PilotJob(
            tq_url=self.tq_url or default_tq_url,
            workdir_base=self.workdir,
            executable=self.executable,
            submit_dir=self.submit_dir,
            requirements=self.requirements,
            extra_args=self.args,
            environment=dict(self.environment),
            request_memory=self.memory,
            request_disk=self.disk * 1024,
            cpus=self.cpus,
            ttl=self.ttl,
            collector=self.collector,
            base_config=self.base_config,
        )
        template = PilotInfo(0, cpus=self.cpus, memory=self.memory, disk=self.disk)
        return SitePolicy(self.site, self.limits, job, template)

    def submitter(
        self,
        issuer: CredentialIssuer | None,
        managers: dict[tuple[str | None, str | None], PilotManager],
    ) -> PilotSubmitter:
        """What submits this site's pilots: its schedds' balancer (``tq.manager.schedds``), or the
        one
        schedd's PilotManager, shared through ``managers`` with the sites on that schedd.  Each
        pilot job gets its own credential of its site from ``issuer`` (tq.client.credentials)."""
        if self.schedds:
            return submitter_for(self.pool, self.schedds, issuer)
        return managers.setdefault(
            (self.pool, self.schedd), PilotManager(self.pool, self.schedd, credentials=issuer)
        )


class _Checker:
    def __init__(self, path: str, site: str, prefix: str = "") -> None:
        self.path = path
        self.site = site
        self.prefix = prefix

    def fail(self, name: str, reason: str) -> SitesFileError:
        return SitesFileError(self.path, reason, site=self.site, field=self.prefix + name)

    def count(self, data: Mapping[str, Any], name: str, default: int | None, low: int) -> int:
        value = data.get(name, default)
        if value is None:
            raise self.fail(name, "is required")
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(name, f"must be an integer, got {shorten(value)}")
        if value < low:
            raise self.fail(name, f"must be >= {low}, got {shorten(value, 30)}")
        return value

    def text(self, data: Mapping[str, Any], name: str, default: str | None) -> str | None:
        value = data.get(name, default)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.fail(name, f"must be a non-empty string, got {shorten(value)}")
        if '"' in value and name not in {"requirements"}:
            raise self.fail(name, "cannot contain a double quote")
        return value


def _pilot(pcheck: _Checker, pilot: Mapping[str, Any]) -> dict[str, Any]:
    """The pilot-job fields of SiteConfig, checked."""
    workdir = pcheck.text(pilot, "workdir", None)
    if workdir is None or not workdir.startswith("/"):
        raise pcheck.fail(
            "workdir", f"must be an absolute path, got {shorten(pilot.get('workdir'))}"
        )
    submit_dir = pcheck.text(pilot, "submitDir", "/") or "/"
    if not submit_dir.startswith("/"):
        raise pcheck.fail("submitDir", f"must be an absolute path, got {shorten(submit_dir)}")
    args = pilot.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str | int | float) for a in args):
        raise pcheck.fail("args", f"must be a list of strings, got {shorten(args)}")
    args_text = tuple(str(a) for a in args)
    if any('"' in a for a in args_text):
        raise pcheck.fail("args", "an argument cannot contain a double quote")
    env = pilot.get("environment", {})
    if not isinstance(env, Mapping) or not all(
        isinstance(k, str) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k) for k in env
    ):
        raise pcheck.fail("environment", "must map variable names to values")
    env_text = {str(k): str(v) for k, v in env.items()}
    if any('"' in v for v in env_text.values()):
        raise pcheck.fail("environment", "a value cannot contain a double quote")
    ttl_raw = pilot.get("ttl")
    ttl: int | None = None
    if ttl_raw is not None:
        if isinstance(ttl_raw, bool) or not isinstance(ttl_raw, int | str):
            raise pcheck.fail(
                "ttl", f"must be a duration like 24h or seconds, got {shorten(ttl_raw)}"
            )
        try:
            ttl = parse_duration(str(ttl_raw))
        except UsageError as exc:
            raise pcheck.fail("ttl", str(exc)) from None
        if ttl < 60:
            raise pcheck.fail("ttl", f"must be at least 60 s, got {ttl}")
    tq_url = pcheck.text(pilot, "tqUrl", None)
    # several instances (Lee 2003): comma-separated, the pilots fail over between them
    if tq_url is not None and not all(
        u.strip().startswith(("http://", "https://")) for u in tq_url.split(",")
    ):
        raise pcheck.fail("tqUrl", f"must be http:// or https:// URL(s), got {shorten(tq_url)}")
    return {
        "workdir": workdir,
        "executable": pcheck.text(pilot, "executable", "glidein-ext") or "glidein-ext",
        "submit_dir": submit_dir,
        "requirements": pcheck.text(pilot, "requirements", "true") or "true",
        "args": args_text,
        "environment": env_text,
        "ttl": ttl,
        "cpus": pcheck.count(pilot, "cpus", 1, 1),
        "memory": pcheck.count(pilot, "memory", 1024, 1),
        "disk": pcheck.count(pilot, "disk", 10240, 1),
        "tq_url": tq_url,
        "collector": pcheck.text(pilot, "collector", None),
        "base_config": pcheck.text(pilot, "baseConfig", None),
    }


def _site(path: str, name: str, raw: Any, defaults: Mapping[str, Any]) -> SiteConfig:
    check = _Checker(path, name[:100])
    if not _SITE_NAME.match(name):
        raise check.fail("name", "a site name is letters, digits, '_', '.', '-' (1-100)")
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise SitesFileError(path, "must be a mapping of fields", site=name)
    pilot_raw = raw.get("pilot", {}) or {}
    if not isinstance(pilot_raw, Mapping):
        raise check.fail("pilot", "must be a mapping")
    data = {**defaults, **raw}
    pilot = {**(defaults.get("pilot") or {}), **pilot_raw}
    for key in data:
        if key not in _SITE_KEYS:
            raise check.fail(
                str(key)[:40], f"unknown field (known: {', '.join(sorted(_SITE_KEYS))})"
            )
    pcheck = _Checker(path, name, "pilot.")
    for key in pilot:
        if key not in _PILOT_KEYS:
            known = ", ".join(sorted(_PILOT_KEYS))
            raise pcheck.fail(str(key)[:40], f"unknown field (known: {known})")

    max_pilots = check.count(data, "maxPilots", None, 0)
    min_pilots = check.count(data, "minPilots", 0, 0)
    min_idle = check.count(data, "minIdlePilots", 0, 0)
    if min_pilots > max_pilots:
        raise check.fail("minPilots", f"must be <= maxPilots {max_pilots}, got {min_pilots}")
    if min_idle > max_pilots:
        raise check.fail("minIdlePilots", f"must be <= maxPilots {max_pilots}, got {min_idle}")

    architecture = check.text(data, "architecture", None)
    if architecture is not None and architecture not in _ARCHITECTURES:
        raise check.fail("architecture", f"must be one of {', '.join(_ARCHITECTURES)}")
    return SiteConfig(
        site=name,
        architecture=architecture,
        schedds=_schedds(check, data, max_pilots),
        limits=Thresholds(min_pilots, max_pilots, min_idle),
        pool=check.text(data, "pool", None),
        schedd=check.text(data, "schedd", None),
        **_pilot(pcheck, pilot),
    )


def _schedds(check: _Checker, data: Mapping[str, Any], max_pilots: int) -> tuple[ScheddLimit, ...]:
    """A site's ``schedds`` list, checked: names unique, each ``maxPilots`` (default: the
    site's) and optional ``pool``; not with ``schedd``."""
    raw = data.get("schedds")
    if raw is None:
        return ()
    if data.get("schedd") is not None:
        raise check.fail("schedds", "give either schedd or schedds, not both")
    if not isinstance(raw, list) or not raw:
        raise check.fail("schedds", "must be a non-empty list of {name, maxPilots, pool}")
    found: list[ScheddLimit] = []
    for index, item in enumerate(raw):
        where = _Checker(check.path, check.site, f"schedds[{index}].")
        if not isinstance(item, Mapping):
            raise where.fail("name", "each schedd must be a mapping with a name")
        unknown = set(item) - {"name", "maxPilots", "pool"}
        if unknown:
            raise where.fail(str(sorted(map(str, unknown))[0])[:40], "unknown field")
        name = where.text(item, "name", None)
        if name is None:
            raise where.fail("name", "is required")
        if "/" in name or any(s.name == name for s in found):
            raise where.fail("name", f"must be unique and without '/', got {shorten(name)}")
        limit = where.count(item, "maxPilots", max_pilots, 0)
        found.append(ScheddLimit(name, limit, where.text(item, "pool", None)))
    return tuple(found)


def parse_sites(data: Any, path: str = "<sites>") -> list[SiteConfig]:
    """The sites of a parsed sites file, in file order."""
    if not isinstance(data, Mapping):
        raise SitesFileError(path, "must be a mapping with a 'sites' key")
    unknown = set(data) - {"defaults", "sites"}
    if unknown:
        raise SitesFileError(
            path, f"unknown top-level key(s): {', '.join(sorted(map(str, unknown)))}"
        )
    defaults = data.get("defaults", {})
    defaults = {} if defaults is None else defaults
    if not isinstance(defaults, Mapping):
        raise SitesFileError(path, "'defaults' must be a mapping")
    if not isinstance(defaults.get("pilot") or {}, Mapping):
        raise SitesFileError(path, "'defaults.pilot' must be a mapping")
    sites = data.get("sites")
    if not isinstance(sites, Mapping) or not sites:
        raise SitesFileError(path, "'sites' must be a non-empty mapping of site name to fields")
    return [_site(path, str(name), raw, defaults) for name, raw in sites.items()]


def load_sites(path: str) -> list[SiteConfig]:
    """Read and check a sites file (YAML, or TOML for ``*.toml``)."""
    return parse_sites(
        load_file(path, MAX_FILE_BYTES, functools.partial(SitesFileError, path)), path
    )
