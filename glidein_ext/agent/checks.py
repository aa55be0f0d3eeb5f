"""Environment checks a pilot runs before registering (Hasham 2011 §IV: fail early, run nothing).

Each check is a pure-ish probe returning a problem (one line) or None; ``run_checks`` raises
PilotCheckError listing every failure.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from glidein_ext.errors import PilotCheckError

Check = Callable[[], Optional[str]]  # Optional: evaluated at run time on Python 3.9


@dataclass(frozen=True)
class CheckConfig:
    """What the pilot's environment must offer."""

    workdir: Path
    min_free_mb: int = 100
    commands: tuple[str, ...] = ("sh",)
    env_vars: tuple[str, ...] = ()
    se_dir: Path | None = None


def _writable(path: Path) -> str | None:
    """The work directory is made if missing, but not the path to it: a mistyped ``--workdir``
    must not leave a tree of directories behind (made as whoever runs the pilot)."""
    if not path.is_dir() and not path.parent.is_dir():
        return f"work directory {path}: its parent {path.parent} does not exist"
    try:
        path.mkdir(exist_ok=True)
        probe = path / f".probe-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        return f"work directory {path} is not writable: {exc.strerror}"
    return None


def _free_space(path: Path, min_mb: int) -> str | None:
    try:
        free = shutil.disk_usage(path).free // (1024 * 1024)
    except OSError as exc:
        return f"cannot measure free space in {path}: {exc.strerror}"
    return None if free >= min_mb else f"only {free} MB free in {path}, need {min_mb} MB"


def _command(name: str) -> str | None:
    return None if shutil.which(name) else f"command {name} not found on PATH"


def _env_var(name: str) -> str | None:
    return None if os.environ.get(name) else f"${name} is not set"


def checks_for(config: CheckConfig) -> list[Check]:
    found: list[Check] = [
        lambda: _writable(config.workdir),
        lambda: _free_space(config.workdir, config.min_free_mb),
    ]
    for name in config.commands:
        found.append(functools.partial(_command, name))
    for var in config.env_vars:
        found.append(functools.partial(_env_var, var))
    if config.se_dir is not None:
        se_dir = config.se_dir
        found.append(lambda: None if se_dir.is_dir() else f"storage element {se_dir} is missing")
    return found


def run_checks(checks: Sequence[Check]) -> None:
    problems = [problem for check in checks if (problem := check()) is not None]
    if problems:
        raise PilotCheckError("environment check failed: " + "; ".join(problems))
