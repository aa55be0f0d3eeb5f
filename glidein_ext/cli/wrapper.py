"""`glidein-ext wrapper`: start a glidein (condor_master) and keep the handshake."""

from __future__ import annotations

import os
import re
from importlib import resources
from typing import Any

import click

GLIDEIN_SNIPPET = "50-glidein-ext-glidein.config"
# The flags that go as they are into the glidein's Settings (layered over its file and
# environment), its TqOptions and its WrapperConfig (glidein.wrapper), each under its own name.
SETTINGS_FLAGS = ("cron_period", "priority_factor", "deadline_margin", "max_vacate_time")
TQ_FLAGS = ("fetch_delay", "se", "se_dir", "dht_bind", "pilot_config")
WRAPPER_FLAGS = (
    "launcher",
    "extra_config",
    "condor_master",
    "static_slots",
    "collector",
    "site",
    "agent_only",
    "watch_pid",
)


def default_snippet() -> str:
    return str(resources.files("glidein_ext").joinpath("condor_config.d", GLIDEIN_SNIPPET))


@click.command()
@click.option("--start-dir", default=".", show_default=True, help="The glidein's start-up dir.")
@click.option("--cpus", type=click.IntRange(min=1), default=None, help="CPUs (default: all).")
@click.option(
    "--memory",
    "memory_mb",
    type=click.IntRange(min=64),
    default=None,
    help="Memory in MB (default: 2048 per CPU).",
)
@click.option("--name", default=None, help="Glidein name (MASTER_NAME/STARTD_NAME).")
@click.option(
    "--base-config",
    default=None,
    help="HTCondor config to include first (the factory's or site's base).",
)
@click.option(
    "--collector",
    default=None,
    help="The pool to join, host[:port] (COLLECTOR_HOST over the base config's): the VO's pool.",
)
@click.option("--site", default=None, help="The site's name, published as GLIDEIN_Site.")
@click.option("--snippet", default=None, help="Glidein snippet (default: the packaged one).")
@click.option(
    "--launcher",
    default=None,
    help="Command HTCondor runs for the cron and hooks (default: this glidein-ext).",
)
@click.option("--lifetime", default=None, help="Glidein lifetime, e.g. 48h (sets GLIDEIN_ToDie).")
@click.option(
    "--retire-after", default=None, help="Stop taking jobs after this (GLIDEIN_ToRetire)."
)
@click.option("--cron-period", type=int, default=None, help="Startd cron period in seconds.")
@click.option("--priority-factor", type=int, default=None, help="PRIORITY_FACTOR to publish.")
@click.option(
    "--deadline-margin",
    type=int,
    default=None,
    help="Seconds before the deadline by which jobs must be gone.",
)
@click.option("--max-vacate-time", type=int, default=None, help="MachineMaxVacateTime (seconds).")
@click.option("--config", "config_file", default=None, help="glidein-ext settings file (TOML).")
@click.option(
    "--condor-config-line",
    "extra_config",
    multiple=True,
    help="Extra HTCondor config line (repeatable), after the snippet.",
)
@click.option("--condor-master", default="condor_master", show_default=True)
@click.option(
    "--static-slots",
    is_flag=True,
    help="One static slot per CPU instead of one partitionable slot.",
)
@click.option(
    "--tq",
    "tq_url",
    default=None,
    help="Task Queue URL: run its tasks (needs --site); several instances comma-separated.",
)
@click.option(
    "--tq-token-file",
    default=None,
    help="The pilot credential (a file of ours; else $GLIDEIN_EXT_TQ_PILOT_TOKEN).",
)
@click.option(
    "--tq-ca-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="CA (PEM) of an https:// Task Queue (else the agent's ca_file setting, else "
    "$GLIDEIN_EXT_TQ_CA_FILE, else the system's).",
)
@click.option(
    "--tq-lanes",
    type=click.IntRange(min=1),
    default=None,
    help="Task Queue pilots (tasks at once) in this glidein (default: its CPUs).",
)
@click.option(
    "--fetch-delay",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Seconds between fetch-work attempts of a free slot (FetchWorkDelay).",
)
@click.option("--se", default="", help="Storage element name (Task Queue work).")
@click.option("--se-dir", default=None, help="Storage element directory (Task Queue work).")
@click.option("--dht-bind", default=None, help="Address of the agent's DHT node and file server.")
@click.option(
    "--pilot-config", default=None, help="The agent's settings (TOML, GLIDEIN_EXT_PILOT_*)."
)
@click.option(
    "--agent-only",
    is_flag=True,
    help="Run only the Task Queue agent, beside a condor_master started elsewhere (glideinWMS).",
)
@click.option(
    "--watch-pid",
    type=click.IntRange(min=1),
    default=None,
    help="With --agent-only: leave when this process (the glidein's) has ended.",
)
@click.option("-v", "--verbose", is_flag=True, help="Log the agent's every step.")
def wrapper(**opts: Any) -> None:
    """Write .pilot.ad, start condor_master with the glidein config, obey .site.ad.

    With --tq, also run the pilot agent: the startd pulls Task Queue tasks through its
    fetch-work hooks (docs/glidein.md: "Task Queue work through the glidein's startd")."""
    import logging

    from glidein_ext.errors import UsageError
    from glidein_ext.glidein.handoff.wiring import TqOptions, load_token
    from glidein_ext.glidein.settings import Settings
    from glidein_ext.glidein.wrapper import GlideinWrapper, WrapperConfig
    from glidein_ext.timefmt import parse_duration

    site, tq_url = opts["site"], opts["tq_url"]
    for option in ("name", "site", "collector"):
        value = opts[option]
        if value is not None and not re.fullmatch(r"[A-Za-z0-9_.@:+-]{1,200}", value):
            raise UsageError(f"--{option} {value!r}: use letters, digits and _ . @ : + - only")

    settings = Settings.load(
        opts["config_file"], overrides={name: opts[name] for name in SETTINGS_FLAGS}
    )
    tq = None
    if tq_url is not None:
        if not site:
            raise UsageError("--tq needs --site (the site's name at the Task Queue)")
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", site):  # the Task Queue's site names
            raise UsageError(
                f"--site {site!r}: with --tq a site name is letters, digits, '_', '.', '-' "
                "(1-100), as the Task Queue takes it"
            )
        if not all(u.strip().startswith(("http://", "https://")) for u in tq_url.split(",")):
            raise UsageError(f"--tq {tq_url!r}: give http:// or https:// URLs (comma-separated)")
        tq = TqOptions(
            url=tq_url,
            site=site,
            token=load_token(opts["tq_token_file"], opts["pilot_config"], os.environ),
            ca_file=os.path.abspath(opts["tq_ca_file"]) if opts["tq_ca_file"] else None,
            lanes=opts["tq_lanes"],
            **{name: opts[name] for name in TQ_FLAGS},
        )
        logging.basicConfig(
            level=logging.INFO if opts["verbose"] else logging.WARNING,
            format="glidein-ext agent %(asctime)s %(levelname)s %(name)s %(message)s",
        )
        # What a site operator reads in the glidein's log: the lanes coming and going.
        logging.getLogger("glidein_ext.agent.glidein").setLevel(logging.INFO)
    elif opts["agent_only"]:
        raise UsageError("--agent-only needs --tq")
    ncpus = opts["cpus"] or os.cpu_count() or 1
    cfg = WrapperConfig(
        start_dir=os.path.abspath(opts["start_dir"]),
        cpus=ncpus,
        memory_mb=opts["memory_mb"] or 2048 * ncpus,
        name=opts["name"] or f"glidein_{os.getpid()}",
        snippet=os.path.abspath(opts["snippet"]) if opts["snippet"] else default_snippet(),
        base_config=os.path.abspath(opts["base_config"]) if opts["base_config"] else None,
        lifetime=parse_duration(opts["lifetime"]) if opts["lifetime"] else None,
        retire_after=parse_duration(opts["retire_after"]) if opts["retire_after"] else None,
        settings=settings,
        tq=tq,
        **{name: opts[name] for name in WRAPPER_FLAGS},
    )

    def log(message: str) -> None:
        click.echo(f"glidein-ext wrapper: {message}", err=True)

    status = GlideinWrapper(cfg, log=log).run()
    raise SystemExit(status)
