"""The `glidein-ext` entry point, with a fast path for what HTCondor runs.

The startd runs ``glidein-ext cron`` every period in every glidein and the starter runs
``glidein-ext hook ...`` at every job start and exit.  Those argument lists are fixed by the config
snippet, so they are recognised here without importing click (a third of the start-up time);
anything else -- and any argument list the fast path does not fully understand -- goes to the click
CLI, which gives the proper usage errors.
"""

from __future__ import annotations

import os
import sys
import time

MAX_JOB_AD_BYTES = 1024 * 1024


def run_cron_command(start_dir: str | None, todie: str | None) -> None:
    """Print the slot attributes for this run; never raises (the startd-cron output contract)."""
    from glidein_ext.glidein.hooks import run_cron

    report = run_cron(start_dir, int(time.time()), os.environ, config_todie=todie)
    sys.stdout.write(report.render())
    sys.stdout.flush()


def run_hook_command(kind: str, start_dir: str) -> None:
    """A job hook: job ad on stdin, nothing on stdout, problems on stderr (the StarterLog).

    Returns normally whatever happens: a bookkeeping problem must never fail a user job.
    """
    try:
        text = sys.stdin.buffer.read(MAX_JOB_AD_BYTES).decode("utf-8", errors="replace")
        from glidein_ext.glidein import hooks

        handler = hooks.prepare_job if kind == "prepare-job" else hooks.job_exit
        problems = handler(start_dir, text, int(time.time()), os.environ)
    except Exception as exc:  # noqa: BLE001 -- a hook must never fail the job: report it
        problems = [f"internal error: {exc!r}"]
    for problem in problems:
        sys.stderr.write(f"glidein-ext hook {kind}: {problem}\n")


def _options(args: list[str], names: set[str]) -> tuple[dict[str, str], list[str]] | None:
    """``--name value`` / ``--name=value`` pairs for ``names``, and the remaining words."""
    values: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if name not in names:
                return None
            if not eq:
                if i + 1 >= len(args):
                    return None
                value = args[i + 1]
                i += 1
            values[name] = value
        else:
            rest.append(arg)
        i += 1
    return values, rest


def fast_path(argv: list[str]) -> bool:
    """Run `cron` or `hook` without click; False if ``argv`` is not one of those forms."""
    if not argv:
        return False
    if argv[0] == "cron":
        parsed = _options(argv[1:], {"start-dir", "todie"})
        if parsed is None or parsed[1]:
            return False
        run_cron_command(parsed[0].get("start-dir"), parsed[0].get("todie"))
        return True
    if argv[0] == "hook" and len(argv) > 1 and argv[1] in ("prepare-job", "job-exit"):
        parsed = _options(argv[2:], {"start-dir"})
        if parsed is None or "start-dir" not in parsed[0]:
            return False
        run_hook_command(argv[1], parsed[0]["start-dir"])
        return True
    return False


def main() -> None:
    if fast_path(sys.argv[1:]):
        return
    from glidein_ext.cli import main as cli_main

    cli_main()
