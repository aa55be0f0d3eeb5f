"""A glidein with a Task Queue: the pieces the wrapper and the glideinWMS custom script share.

``glidein-ext wrapper --tq URL --site S`` (or ``glidein-ext-setup.sh`` with
``GLIDEIN_EXT_TQ_URL``) runs the glidein's agent (``handoff.agent``) beside condor_master and
has the startd pull its tasks through the fetch-work hooks:

- the hook launchers, ``START_DIR/.glidein-ext/hooks/{fetch-work,reply-fetch,evict-claim}``: the
  startd runs its hooks without arguments (``<KEYWORD>_HOOK_<NAME>_ARGS`` is read by the starter
  only), so each is a two-line script that runs ``glidein-ext hook NAME --start-dir DIR``;
  HTCondor refuses hook files or directories that others can write, so both are 0755 and ours.
  ``job-exit`` is one too, in every glidein: HTCondor 23's starter gives JOB_EXIT the exit reason
  and not its ``_ARGS`` (seen in the StarterLog: ``glidein-ext exit``);
- the HTCondor configuration: ``GLIDEIN_EXT_HOOKS`` (the launchers' directory), and with a Task
  Queue ``GLIDEIN_EXT_TQ_WORK = True`` (turns the fetch-work hooks on in the packaged snippet)
  and ``GLIDEIN_EXT_FETCH_DELAY``;
- the pilot credential and every other setting of the agent, as ``glidein-ext pilot run`` has
  them (``agent.config``: one place for both): a token file under the one rule (a regular file
  of ours, not a symlink, mode 0600 or stricter: refused otherwise; the PilotManager transfers
  one with each glidein, private) or ``$GLIDEIN_EXT_TQ_PILOT_TOKEN``; the CA of an ``https://``
  Task Queue likewise (the wrapper's ``--tq-ca-file``, else the ``ca_file`` setting, else
  ``$GLIDEIN_EXT_TQ_CA_FILE``).

Python 3.9, standard library only.
"""

from __future__ import annotations

import os
import pwd
import shlex
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from glidein_ext.adfile import write_text_atomic
from glidein_ext.condor import config_value
from glidein_ext.glidein.info import state_dir

FETCH_HOOKS = ("fetch-work", "reply-fetch", "evict-claim")
EXIT_HOOK = "job-exit"
BATCH_ENV = "GLIDEIN_EXT_TQ_BATCH_ID"

if TYPE_CHECKING:  # the agent is imported when a glidein has a Task Queue only
    from glidein_ext.glidein.handoff.agent import GlideinAgent


@dataclass(frozen=True)
class TqOptions:
    """What the glidein's agent needs beyond the glidein itself (the wrapper's --tq options)."""

    url: str
    site: str
    token: str = field(repr=False)
    lanes: int | None = None  # default: the glidein's CPUs
    fetch_delay: int = 10  # FetchWorkDelay of a free slot, seconds
    se: str = ""
    se_dir: str | None = None
    dht_bind: str | None = None
    pilot_config: str | None = None  # the agent's TOML settings (GLIDEIN_EXT_PILOT_*)
    ca_file: str | None = None  # the wrapper's --tq-ca-file: wins over the ca_file setting


def load_token(token_file: str | None, pilot_config: str | None, env: Mapping[str, str]) -> str:
    """The glidein's pilot credential (``agent.config.pilot_token``): ``token_file`` (the
    wrapper's --tq-token-file) wins over the settings' ``token_file``, then the environment."""
    from glidein_ext.agent.config import pilot_token
    from glidein_ext.agent.settings import AgentSettings

    settings = AgentSettings.load(pilot_config, env, {"token_file": token_file})
    return pilot_token(settings, None, env)


def hooks_dir(start_dir: str) -> str:
    return os.path.join(state_dir(start_dir), "hooks")


def write_hook_launchers(start_dir: str, launcher: str, fetch: bool) -> str:
    """The hook scripts (job-exit; with ``fetch``, the fetch-work ones); their directory."""
    directory = hooks_dir(start_dir)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    os.chmod(directory, 0o755)  # noqa: S103 -- HTCondor runs them; only we may write them
    for name in (EXIT_HOOK, *(FETCH_HOOKS if fetch else ())):
        command = [launcher, "hook", name, "--start-dir", start_dir]
        body = f'#!/bin/sh\nexec {" ".join(shlex.quote(w) for w in command)} "$@"\n'
        write_text_atomic(os.path.join(directory, name), body, mode=0o755)
    return directory


def config_lines(start_dir: str, tq: TqOptions | None) -> list[str]:
    """The launchers' directory and, with a Task Queue, what turns the packaged snippet's
    fetch-work hooks on (before the snippet's include)."""
    lines = [f"GLIDEIN_EXT_HOOKS = {config_value(hooks_dir(start_dir))}"]
    if tq is not None:
        lines += ["GLIDEIN_EXT_TQ_WORK = True", f"GLIDEIN_EXT_FETCH_DELAY = {tq.fetch_delay}"]
    return lines


def owner() -> str:
    """The Unix user the glidein runs as (its fetched jobs' Owner)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return os.environ.get("USER", "nobody")


def build_agent(
    tq: TqOptions,
    *,
    start_dir: str,
    name: str,
    cpus: int,
    memory_mb: int,
    lifetime: int | None,
    env: Mapping[str, str],
    retiring: Callable[[], bool],
) -> GlideinAgent:
    """The glidein's :class:`~glidein_ext.glidein.handoff.agent.GlideinAgent`, not started."""
    from glidein_ext.agent.checks import run_checks
    from glidein_ext.agent.config import agent_config, workdir_checks
    from glidein_ext.agent.settings import AgentSettings
    from glidein_ext.glidein.handoff.agent import GlideinAgent, GlideinAgentConfig
    from glidein_ext.glidein.handoff.executor import GlideinIdentity

    overrides = {
        "dht_bind": tq.dht_bind,
        "cpus": cpus,
        "memory": memory_mb,
        "ca_file": tq.ca_file,
    }
    settings = AgentSettings.load(tq.pilot_config, env, overrides)
    workdir = Path(state_dir(start_dir)) / "tq"
    os.makedirs(workdir.parent, exist_ok=True)
    run_checks(workdir_checks(settings, workdir))
    agent = agent_config(
        settings,
        env,
        url=tq.url,
        token=tq.token,
        site=tq.site,
        workdir=workdir,
        host=socket.gethostname(),
        se=tq.se,
        se_dir=Path(tq.se_dir).resolve() if tq.se_dir else None,
        ttl=lifetime,
        attributes={"GLIDEIN_Name": name},
        batch_id=env.get(BATCH_ENV) or None,
    )
    path = env.get("PATH") or os.defpath
    config = GlideinAgentConfig(
        agent=agent,
        start_dir=start_dir,
        lanes=tq.lanes or cpus,
        identity=GlideinIdentity(name, owner(), path),
    )
    return GlideinAgent(config, retiring)
