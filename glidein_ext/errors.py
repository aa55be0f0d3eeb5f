"""The one exception hierarchy of glidein-ext.

Helpers raise these; HTCondor, OS and HTTP errors are translated at the boundary with
``raise ... from exc``; only the CLI turns them into one line and a non-zero exit.
"""

from __future__ import annotations


class GlideinExtError(Exception):
    """Base of every error glidein-ext raises on purpose."""

    exit_code = 1


class UsageError(GlideinExtError):
    """The user asked for something malformed (bad flag value, bad duration)."""

    exit_code = 2


class ConfigError(GlideinExtError):
    """A setting is missing or has a value that cannot be used."""


class AdFileError(GlideinExtError):
    """An ad file (.pilot.ad, .site.ad, MJF value) is unsafe or malformed.

    ``path`` and ``line`` say where; ``str()`` is one line a human can act on.
    """

    def __init__(self, path: str, reason: str, line: int | None = None) -> None:
        self.path = path
        self.reason = reason
        self.line = line
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {reason}")


class AdFileMissing(AdFileError):
    """The ad file does not exist (a normal state for .site.ad)."""


class CondorError(GlideinExtError):
    """HTCondor (a daemon, a tool or the Python bindings) failed."""


class StateError(GlideinExtError):
    """The glidein's persisted state (running jobs) could not be read or written."""


class DhtError(GlideinExtError):
    """The site DHT failed: no contact answered, a key was not found, or a message was too large."""
