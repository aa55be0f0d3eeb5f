"""The `glidein-ext` entry point, with a fast path for what HTCondor runs.

The startd runs ``glidein-ext cron`` every period in every glidein and the starter runs
``glidein-ext hook ...`` at every job start and exit; a glidein with a Task Queue also has its
startd run ``glidein-ext hook fetch-work|reply-fetch|evict-claim`` (every FetchWorkDelay on a free
slot).  Those argument lists are fixed by the config snippet and the hook launchers, so they are
recognised here without importing click (a third of the start-up time); anything else -- and any
argument list the fast path does not fully understand -- goes to the click CLI, which gives the
proper usage errors.

Output contracts (HTCondor's): the cron prints its attributes; ``fetch-work`` prints one job ad or
nothing; the other hooks print nothing.  Every hook exits 0, except ``prepare-job`` for a Task
Queue task the agent does not hold (or cannot be asked about): exit 1, which makes the starter
abort that job rather than run a task nobody would report.  Problems go to stderr (the StartLog or
StarterLog).
"""

from __future__ import annotations

import os
import sys
import time

MAX_JOB_AD_BYTES = 1024 * 1024
_HOOKS = ("prepare-job", "job-exit", "fetch-work", "reply-fetch", "evict-claim")


def run_cron_command(start_dir: str | None, todie: str | None) -> None:
    """Print the slot attributes for this run; never raises (the startd-cron output contract)."""
    from glidein_ext.glidein.hooks import run_cron

    report = run_cron(start_dir, int(time.time()), os.environ, config_todie=todie)
    sys.stdout.write(report.render())
    sys.stdout.flush()


def _stdin_text() -> str:
    return sys.stdin.buffer.read(MAX_JOB_AD_BYTES).decode("utf-8", errors="replace")


def _emit(kind: str, out: str, problems: tuple[str, ...]) -> None:
    for problem in problems:
        sys.stderr.write(f"glidein-ext hook {kind}: {problem}\n")
    if out:
        sys.stdout.write(out)
        sys.stdout.flush()


def run_hook_command(kind: str, start_dir: str, reason: str = "") -> int:
    """A starter job hook (``glidein.hooks.run_job_hook``): job ad on stdin, nothing on stdout,
    problems on stderr (StarterLog); returns the exit status."""
    from glidein_ext.glidein.hooks import run_job_hook

    result = run_job_hook(kind, start_dir, reason, _stdin_text())
    _emit(kind, "", result.problems)
    return result.status


def run_fetch_command(kind: str, start_dir: str, verdict: str = "") -> None:
    """A startd fetch-work hook (``glidein.handoff.hooks.run_fetch_hook``): never raises."""
    try:
        text = _stdin_text()
    except OSError as exc:
        _emit(kind, "", (f"cannot read stdin: {exc}",))
        return
    from glidein_ext.glidein.handoff.hooks import run_fetch_hook

    result = run_fetch_hook(kind, start_dir, verdict, text)
    _emit(kind, result.out, result.problems)


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
    if argv[0] == "hook" and len(argv) > 1 and argv[1] in _HOOKS:
        parsed = _options(argv[2:], {"start-dir"})
        if parsed is None or "start-dir" not in parsed[0]:
            return False
        start_dir, rest = parsed[0]["start-dir"], parsed[1]
        if argv[1] in ("prepare-job", "job-exit"):
            # JOB_EXIT's argument says how the job ended (exit, evict, remove, hold).
            status = run_hook_command(argv[1], start_dir, rest[0] if rest else "")
            if status:
                sys.exit(status)
        else:
            run_fetch_command(argv[1], start_dir, rest[0] if rest else "")
        return True
    return False


def main() -> None:
    if fast_path(sys.argv[1:]):
        return
    from glidein_ext.cli import main as cli_main

    cli_main()
