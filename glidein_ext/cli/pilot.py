"""`glidein-ext pilot run`: the standalone pilot agent (Hasham 2011 §IV), without HTCondor."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click

from glidein_ext.agent.settings import AgentSettings
from glidein_ext.errors import GlideinExtError, UsageError
from glidein_ext.sched.assign import DEFAULT_METHOD, METHODS

TOKEN_ENV = "GLIDEIN_EXT_TQ_PILOT_TOKEN"  # noqa: S105 (a variable name)
TOKEN_FILE_ENV = "GLIDEIN_EXT_PILOT_TOKEN_FILE"  # noqa: S105 (a variable name)
URL_ENV = "GLIDEIN_EXT_TQ_URL"
# A site's name: the sites file's rule (tq.manager.sites), which the PilotMonitor's sites obey.
SITE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
F = TypeVar("F", bound=Callable[..., Any])


def _pilot_count(flag: str, text: str) -> Callable[[F], F]:
    """An option counting pilots: 1 to 10,000, one by default."""
    return click.option(
        flag, type=click.IntRange(1, 10_000), default=1, show_default=True, help=text
    )


def _setting(flag: str, name: str, kind: type, text: str) -> Callable[[F], F]:
    """An option that overrides the pilot's setting ``name`` (agent.settings.AgentSettings, where
    its default is declared): ``text`` shows that default at ``{}``."""
    default = getattr(AgentSettings, name)
    shown = f"{default:g}" if isinstance(default, float) else default
    return click.option(flag, name, type=kind, default=None, help=text.format(shown))


def _check_ad_options(ttl: int | None, requirements: str, rank: str) -> None:
    """What the pilot's ad says about itself, checked before anything starts: a life left
    (HTCondor's GLIDEIN_ToDie less now) is not negative, and the Requirements and Rank parse as
    ClassAd expressions (where classad2 is installed; on a bare worker node the Task Queue checks
    them at registration)."""
    if ttl is not None and ttl < 0:
        raise UsageError(f"--ttl must be 0 or more seconds of life left, got {ttl}")
    try:
        from glidein_ext.classads import parse_expr
    except ImportError:  # a worker node's Python without classad2
        return
    from glidein_ext.errors import ClassAdError

    for option, text in (("--requirements", requirements), ("--rank", rank)):
        try:
            parse_expr(text, option)
        except ClassAdError as exc:
            raise UsageError(str(exc)) from None


@contextlib.contextmanager
def _stopping_on_signals(stopper: Callable[[], None]) -> Iterator[None]:
    """SIGTERM, SIGHUP and a first Ctrl-C (SIGINT) stop the pilot the orderly way: its task's
    process group is killed and the task given back; a second Ctrl-C interrupts at once; on
    SIGKILL the pilot's task guardian kills the task's process group (agent.taskproc)."""

    def interrupted(*_: Any) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        stopper()

    handled = (signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, lambda *_: stopper()) for sig in handled}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@click.group()
def pilot() -> None:
    """The pilot agent: pull tasks from a Task Queue and run them."""


@pilot.command()
@click.option(
    "--tq",
    "url",
    multiple=True,
    help=f"Task Queue URL; repeat it or separate with commas for several instances (failover; "
    f"or ${URL_ENV}).",
)
@click.option("--site", required=True, help="Site name the pilot runs at.")
@click.option("--workdir", required=True, type=click.Path(file_okay=False), help="Work directory.")
@click.option("--token", default=None, help=f"Shared pilot token (or ${TOKEN_ENV}).")
@click.option(
    "--token-file",
    default=None,
    help=f"File with the pilot's credential, mode 0600 (or ${TOKEN_FILE_ENV}); wins over --token.",
)
@click.option(
    "--ca-file",
    default=None,
    help="CA (PEM) of an https:// Task Queue (or $GLIDEIN_EXT_PILOT_CA_FILE, else "
    "$GLIDEIN_EXT_TQ_CA_FILE; default: the system's).",
)
@click.option("--host", default=None, help="Host name to register (default: this host).")
@click.option("--se", default="", help="Storage element name.")
@click.option("--se-dir", default=None, type=click.Path(file_okay=False), help="SE directory.")
@click.option("--config", "config_file", default=None, help="TOML settings file.")
@_setting("--cpus", "cpus", int, "CPUs (default {}).")
@_setting("--memory", "memory", int, "MB (default {}).")
@_setting("--disk", "disk", int, "MB (default {}).")
@click.option("--ttl", type=int, default=None, help="Seconds of life left (default: no end).")
@click.option("--requirements", default="true", show_default=True, help="Pilot's Requirements.")
@click.option("--rank", default="0", show_default=True, help="Pilot's Rank of tasks.")
@click.option(
    "--centralized",
    is_flag=True,
    help="Send the cache list with each request (implied at a centralized site).",
)
@_setting("--poll", "poll_interval", float, "Seconds between asks ({}).")
@_setting("--poll-max", "poll_max", float, "Longest wait between empty asks ({}).")
@_setting(
    "--offer-wait",
    "offer_wait",
    float,
    "Idle: leave a standing offer this many seconds (courier push of urgent tasks; {}).",
)
@click.option("--max-idle", type=float, default=None, help="Leave after SECONDS without work.")
@click.option("--max-tasks", type=int, default=None, help="Leave after running N tasks.")
@_setting("--retry-for", "retry_for", float, "Seconds to retry the TQ ({}).")
@_setting("--min-free-mb", "min_free_mb", int, "Check: free disk, MB ({}).")
@click.option("--require-command", "commands", multiple=True, help="Check: command on PATH.")
@click.option("--require-env", "env_vars", multiple=True, help="Check: variable set.")
@click.option("--batch-id", default=None, help="Batch job id (default $GLIDEIN_EXT_TQ_BATCH_ID).")
@_setting(
    "--cache-max-space", "cache_max_space", str, "Cache Max_Space per pilot ({}; 500M, bytes)."
)
@_setting(
    "--cache-min-threshold",
    "cache_min_threshold",
    str,
    "Cache Min_Threshold, kept free ({}); capacity: Max_Space x pilots on host - this.",
)
@_pilot_count("--pilots", "Pilots in this process (one event loop, a thread each).")
@_pilot_count(
    "--pilots-per-host", "With --pilots: pilots per simulated host (HOST-0000, ...; caches shared)."
)
@click.option("--batch-reports", is_flag=True, help="With --pilots: reports ready at once, 1 call.")
@click.option("--dht-bind", default=None, help="Address of the DHT node and file server.")
@click.option(
    "--assignment",
    type=click.Choice(list(METHODS)),
    default=None,
    help=f"The master's assignment method (distributed sites; default {DEFAULT_METHOD}).",
)
@_setting("--round-window", "round_window", float, "Batching after events ({} s).")
@_setting("--round-period", "round_period", float, "Rounds without events ({} s).")
@_setting("--broadcast-timeout", "broadcast_timeout", float, "TaskList wait ({} s).")
@click.option("--storage-xml", default=None, help="The site's TFC (storage.xml or .json).")
@_setting("--tfc-protocol", "tfc_protocol", str, "The TFC protocol to use ({}).")
@click.option("--se-delay", type=float, default=None, help="SE delay factor (Hasham 2011 Table I).")
@click.option("--se-failure-rate", type=float, default=None, help="SE failure rate (0..1).")
@_setting("--se-time-scale", "se_time_scale", float, "Seconds per delay unit ({}).")
@click.option(
    "--se-condition",
    type=click.Choice(["d1f1", "d2f2", "d3f3"]),
    default=None,
    help="A Table I condition: sets --se-delay and --se-failure-rate.",
)
@click.option("-v", "--verbose", is_flag=True)
def run(**opts: Any) -> None:
    """Check the environment, register, run tasks until idle/stopped, deregister (SIGTERM too)."""
    from glidein_ext.agent.agent import PilotAgent
    from glidein_ext.agent.checks import run_checks
    from glidein_ext.agent.config import agent_config, pilot_token, workdir_checks
    from glidein_ext.agent.swarm import Swarm, swarm_configs
    from glidein_ext.cache.se import condition
    from glidein_ext.tq.client.endpoints import parse_endpoints

    if not SITE_NAME.match(opts["site"]):
        raise UsageError(
            f"--site {opts['site']!r}: a site name is letters, digits, '_', '.', '-' (1-100), "
            "as in the sites file"
        )
    _check_ad_options(opts["ttl"], opts["requirements"], opts["rank"])
    if opts["se_condition"]:
        table = condition(opts["se_condition"])
        opts["se_delay"], opts["se_failure_rate"] = table.delay_factor, table.failure_rate
    layered = {f.name: opts[f.name] for f in dataclasses.fields(AgentSettings)}
    settings = AgentSettings.load(opts["config_file"], os.environ, overrides=layered)
    # A credential's file (per pilot, private) wins over the shared token (small setups).
    token = pilot_token(settings, opts["token"], os.environ)
    url = ",".join(opts["url"]) or os.environ.get(URL_ENV, "")
    if not url:
        raise UsageError(f"give --tq URL (repeated for several instances) or ${URL_ENV}")
    parse_endpoints(url)  # a malformed URL is the user's error, before anything starts
    workdir = Path(opts["workdir"]).resolve()
    se_dir = Path(opts["se_dir"]).resolve() if opts["se_dir"] else None
    run_checks(
        workdir_checks(
            settings,
            workdir,
            commands=("sh", *opts["commands"]),
            env_vars=tuple(opts["env_vars"]),
            se_dir=se_dir,
        )
    )
    logging.basicConfig(
        level=logging.INFO if opts["verbose"] else logging.WARNING,
        format="pilot %(asctime)s %(levelname)s %(message)s",
    )
    if opts["pilots"] == 1:  # its registration and reconnections (a swarm's would be N lines)
        logging.getLogger("glidein_ext.agent.life").setLevel(logging.INFO)
    extra: dict[str, Any] = {}
    if opts["host"]:
        extra["host"] = opts["host"]
    config = agent_config(
        settings,
        os.environ,
        url=url,
        token=token,
        site=opts["site"],
        workdir=workdir,
        se=opts["se"],
        se_dir=se_dir,
        ttl=opts["ttl"],
        requirements=opts["requirements"],
        rank=opts["rank"],
        centralized=opts["centralized"],
        max_idle=opts["max_idle"],
        max_tasks=opts["max_tasks"],
        batch_id=opts["batch_id"] or os.environ.get("GLIDEIN_EXT_TQ_BATCH_ID"),
        **extra,
    )
    stop = threading.Event()
    swarm = None
    if opts["pilots"] > 1:
        configs = swarm_configs(config, opts["pilots"], opts["pilots_per_host"])
        swarm = Swarm(configs, batch_reports=opts["batch_reports"])
    stopper = swarm.stop if swarm is not None else stop.set
    with _stopping_on_signals(stopper):
        ran = PilotAgent(config, stop).run() if swarm is None else sum(swarm.run())
    if swarm is None:
        click.echo(f"pilot ran {ran} task(s)", err=True)
        return
    click.echo(f"{len(swarm.configs)} pilots ran {ran} task(s); {swarm.failed} failed", err=True)
    if swarm.batcher is not None and swarm.batcher.requests:
        batcher = swarm.batcher
        click.echo(f"{batcher.reports} reports in {batcher.requests} request(s)", err=True)
    if swarm.failed == len(swarm.configs):
        reasons = sorted(swarm.reasons.items(), key=lambda item: -item[1])
        first = f": {reasons[0][0]}" if reasons else " (see the log)"
        raise GlideinExtError(f"every pilot of the swarm failed{first}")
