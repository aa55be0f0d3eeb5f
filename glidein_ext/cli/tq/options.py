"""What the `tq` commands that call a running Task Queue share: its URL (several instances, Lee
2003), the operator token and the CA of an https:// Task Queue, as options or from the
environment."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from glidein_ext.errors import UsageError

if TYPE_CHECKING:
    from glidein_ext.tq.client.client import TqClient

URL_ENV = "GLIDEIN_EXT_TQ_URL"
TOKEN_ENV = "GLIDEIN_EXT_TQ_OPERATOR_TOKEN"  # noqa: S105 (a variable name)
CA_ENV = "GLIDEIN_EXT_TQ_CA_FILE"


def operator_client(url: str | None, token: str | None, ca_file: str | None = None) -> TqClient:
    from glidein_ext.tq.client.client import TqClient

    url = url or os.environ.get(URL_ENV)
    token = token or os.environ.get(TOKEN_ENV)
    if not url:
        raise UsageError(f"give --tq URL or set ${URL_ENV}")
    if not token:
        raise UsageError(f"give --token or set ${TOKEN_ENV}")
    return TqClient(url, token, ca_file=ca_file or os.environ.get(CA_ENV) or None)


url_option = click.option(
    "--tq",
    "url",
    multiple=True,
    # several instances (Lee 2003): repeated or comma-separated, one string for the client
    callback=lambda _ctx, _param, urls: ",".join(urls) or None,
    help=f"Task Queue URL; several instances: repeat it or use commas (or ${URL_ENV}).",
)
token_option = click.option("--token", default=None, help=f"Operator token (or ${TOKEN_ENV}).")
ca_option = click.option(
    "--ca-file",
    default=None,
    help=f"CA (PEM) of an https:// Task Queue (or ${CA_ENV}; default: the system's).",
)
