"""`glidein-ext tq`: serve the Task Queue, submit workflows, watch them, generate W1/W2/W3, mint
and revoke pilots' credentials.

The commands, by who runs them: ``service`` (run the service and the PilotMonitor: ``serve``,
``monitor``), ``workflows`` (a user's: ``submit``, ``generate``), ``views`` (watch the run:
``status``, ``task``), ``credentials`` (an operator's: ``credential mint|list|revoke``) and
``cli.assign`` (the master's assignment, Delgado Peris 2014 §III.C); ``options`` holds what the
commands that call a running Task Queue share (its URL, the operator token, the CA).
"""

from __future__ import annotations

import click

from glidein_ext.cli.assign import assign
from glidein_ext.cli.tq.credentials import credential
from glidein_ext.cli.tq.service import monitor, serve
from glidein_ext.cli.tq.views import status, task_command
from glidein_ext.cli.tq.workflows import generate, submit


@click.group()
def tq() -> None:
    """The Task Queue (Hasham 2011 §IV): serve it, submit workflows, watch them."""


for _command in (serve, monitor, submit, status, task_command, generate, credential, assign):
    tq.add_command(_command)
