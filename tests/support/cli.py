"""``glidein-ext`` for the tests that drive its command line: in this process (``run_main``), or
as a process end to end (``run_cli``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence

import pytest

from glidein_ext.cli import main
from glidein_ext.testbed.tq_server import OPERATOR


def operator_env(**extra: str) -> dict[str, str]:
    """This process's environment without any ``GLIDEIN_EXT_*`` setting, with the test Task
    Queue's operator token, plus ``extra``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("GLIDEIN_EXT_")}
    return {**base, "GLIDEIN_EXT_TQ_OPERATOR_TOKEN": OPERATOR, **extra}


def run_cli(
    *args: str, env: Mapping[str, str], timeout: float = 60, wrapper: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """``glidein-ext ARGS`` as a process: its exit code, stdout and stderr; never a traceback.
    ``wrapper``: a command that runs it (``setpriv ...``), the command line after it."""
    done = subprocess.run(
        [*wrapper, sys.executable, "-m", "glidein_ext", *args],
        check=False,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``glidein-ext ARGV`` in this process: its exit code, and what it wrote to stdout and
    stderr."""
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err
