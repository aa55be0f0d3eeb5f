"""A glidein with a Task Queue: the pieces the wrapper and the glideinWMS custom script share.

``glidein-ext wrapper --tq URL --site S`` (or ``glidein-ext-setup.sh`` with
``GLIDEIN_EXT_TQ_URL``) runs the pilot agent (``agent.glidein_agent``) beside condor_master and
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
- the pilot credential: a token file (mode 0600, ours, not a symlink; the PilotManager transfers
  one with each glidein) or ``$GLIDEIN_EXT_TQ_PILOT_TOKEN``.

Python 3.9, standard library only.
"""

from __future__ import annotations

import os
import pwd
import shlex
import socket
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glidein_ext.adfile import write_text_atomic
from glidein_ext.condor import config_value
from glidein_ext.errors import UsageError
from glidein_ext.glidein.info import state_dir

FETCH_HOOKS = ("fetch-work", "reply-fetch", "evict-claim")
EXIT_HOOK = "job-exit"
TOKEN_ENV = "GLIDEIN_EXT_TQ_PILOT_TOKEN"  # noqa: S105 (a variable name)
BATCH_ENV = "GLIDEIN_EXT_TQ_BATCH_ID"
MAX_TOKEN_BYTES = 4096


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


def read_token_file(path: str) -> str:
    """The pilot token in ``path``: a regular file of ours, not a symlink; tightened to 0600."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise UsageError(f"token file {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"token file {path} is not a regular file")
        if info.st_uid != os.geteuid():
            raise UsageError(f"token file {path} is not ours (uid {info.st_uid})")
        if info.st_mode & 0o077:
            os.fchmod(fd, 0o600)  # HTCondor's file transfer does not keep 0600
        data = os.read(fd, MAX_TOKEN_BYTES + 1)
    finally:
        os.close(fd)
    token = data.decode("utf-8", errors="replace").strip()
    if not token or len(data) > MAX_TOKEN_BYTES or any(c.isspace() for c in token):
        raise UsageError(f"token file {path} does not hold one token")
    return token


def token_from(path: str | None, env: Mapping[str, str]) -> str:
    """The token from ``path``, else from the environment; UsageError if neither has one."""
    if path:
        return read_token_file(path)
    token = env.get(TOKEN_ENV, "")
    if not token:
        raise UsageError(f"a glidein with --tq needs --tq-token-file or ${TOKEN_ENV}")
    return token


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
) -> Any:
    """The glidein's :class:`~glidein_ext.agent.glidein_agent.GlideinAgent`, not started."""
    from glidein_ext.agent.agent import AgentConfig
    from glidein_ext.agent.glidein_agent import GlideinAgent, GlideinAgentConfig
    from glidein_ext.agent.settings import load_agent_settings
    from glidein_ext.agent.startd_executor import GlideinIdentity

    overrides = {"dht_bind": tq.dht_bind, "cpus": cpus, "memory": memory_mb}
    settings = load_agent_settings(tq.pilot_config, env, overrides)
    agent = AgentConfig(
        url=tq.url,
        token=tq.token,
        site=tq.site,
        workdir=Path(state_dir(start_dir)) / "tq",
        host=socket.gethostname(),
        se=tq.se,
        se_dir=Path(tq.se_dir).resolve() if tq.se_dir else None,
        cpus=settings.cpus,
        memory=settings.memory,
        disk=settings.disk,
        ttl=lifetime,
        attributes={"GLIDEIN_Name": name},
        poll_interval=settings.poll_interval,
        poll_max=settings.poll_max,
        offer_wait=settings.offer_wait,
        retry_for=settings.retry_for,
        batch_id=env.get(BATCH_ENV) or None,
        cache_max_space=settings.max_space_bytes,
        cache_min_threshold=settings.min_threshold_bytes,
        dht_bind=settings.dht_bind,
        assignment=settings.assignment,
        round_window=settings.round_window,
        round_period=settings.round_period,
        broadcast_timeout=settings.broadcast_timeout,
        se_delay=settings.se_delay,
        se_failure_rate=settings.se_failure_rate,
        se_time_scale=settings.se_time_scale,
        storage_xml=settings.storage_xml,
        tfc_protocol=settings.tfc_protocol,
    )
    path = env.get("PATH") or os.defpath
    config = GlideinAgentConfig(
        agent=agent,
        start_dir=start_dir,
        lanes=tq.lanes or cpus,
        identity=GlideinIdentity(name, owner(), path),
    )
    return GlideinAgent(config, retiring)
