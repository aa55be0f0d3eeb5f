"""The pilot agent's configuration built from its settings: the one place, for every pilot.

``glidein-ext pilot run`` (the standalone pilot) and a glidein's agent (``glidein-ext wrapper
--tq``, ``glidein.handoff.wiring``) both build their :class:`~glidein_ext.agent.agent.AgentConfig`
with :func:`agent_config` and their credential with :func:`pilot_token`, so that a setting of
:class:`~glidein_ext.agent.settings.AgentSettings` (TOML, ``$GLIDEIN_EXT_PILOT_<NAME>``, flags)
means the same to both:

- the settings are the config's own (``AgentConfig.settings``), whole;
- ``ca_file``: the CA of an ``https://`` Task Queue; when no setting gives one,
  ``$GLIDEIN_EXT_TQ_CA_FILE`` (what ``glidein-ext tq`` reads) does;
- ``token_file``: the pilot's credential, read by :func:`pilot_token` under one rule (a regular
  file of ours, not a symlink, neither group- nor world-accessible, one token on one line:
  ``tq.client.client.read_token_file``); it wins over a token given on the command line or in
  ``$GLIDEIN_EXT_TQ_PILOT_TOKEN``;
- ``min_free_mb``: the environment check of the work directory (:func:`workdir_checks`).

Python 3.9, standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from glidein_ext.agent.agent import AgentConfig
from glidein_ext.agent.checks import Check, CheckConfig, checks_for
from glidein_ext.agent.settings import AgentSettings
from glidein_ext.errors import UsageError
from glidein_ext.tq.client.client import read_token_file

CA_FILE_ENV = "GLIDEIN_EXT_TQ_CA_FILE"
TOKEN_ENV = "GLIDEIN_EXT_TQ_PILOT_TOKEN"  # noqa: S105 (a variable name)
TOKEN_FILE_ENV = "GLIDEIN_EXT_PILOT_TOKEN_FILE"  # noqa: S105 (a variable name)


def agent_config(
    settings: AgentSettings,
    env: Mapping[str, str],
    *,
    url: str,
    token: str,
    site: str,
    workdir: Path,
    **fields: Any,
) -> AgentConfig:
    """The agent's configuration: ``settings`` (all of them, see the module) and ``fields``
    (what is not a setting: ttl, host, se, attributes...)."""
    clash = sorted({f.name for f in dataclasses.fields(AgentSettings)} & set(fields))
    if clash:
        raise TypeError(f"settings are given as settings, not as fields: {clash}")
    settings = dataclasses.replace(settings, ca_file=settings.ca_file or env.get(CA_FILE_ENV, ""))
    return AgentConfig(
        url=url, token=token, site=site, workdir=workdir, settings=settings, **fields
    )


def pilot_token(settings: AgentSettings, token: str | None, env: Mapping[str, str]) -> str:
    """The pilot's credential: the file of the ``token_file`` setting (the one rule of
    ``read_token_file``), else ``token``, else ``$GLIDEIN_EXT_TQ_PILOT_TOKEN``; UsageError if
    none gives one."""
    if settings.token_file:
        return read_token_file(settings.token_file)
    found = token or env.get(TOKEN_ENV, "")
    if not found:
        raise UsageError(f"give a token file (${TOKEN_FILE_ENV}) or a token (${TOKEN_ENV})")
    return found


def workdir_checks(settings: AgentSettings, workdir: Path, **more: Any) -> list[Check]:
    """The environment checks of a pilot's work directory (``min_free_mb``; ``more``: the rest
    of :class:`~glidein_ext.agent.checks.CheckConfig`)."""
    return checks_for(CheckConfig(workdir=workdir, min_free_mb=settings.min_free_mb, **more))
