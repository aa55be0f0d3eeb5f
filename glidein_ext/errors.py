"""The one exception hierarchy of glidein-ext.

Helpers raise these; HTCondor, OS, HTTP and database errors are translated at the boundary with
``raise ... from exc`` (HTCondor's once, in :func:`glidein_ext.condor.condor_errors`); only the CLI
turns them into one line and a non-zero exit (``exit_code``; tracebacks with ``--debug``)::

    GlideinExtError                      exit 1
    +-- UsageError                       exit 2: a malformed flag, duration, file given by the user
    |   +-- RankMatrixError              exit 2: a malformed rank matrix (Delgado Peris 2014 §III.C)
    +-- ConfigError                      a setting is missing or unusable
    |   +-- SitesFileError               exit 2: the PilotMonitor's sites file
    |   +-- MissingDependencyError       an optional package (numpy/scipy, classad2) is absent
    +-- AdFileError                      .pilot.ad / .site.ad / MJF value unsafe or malformed
    |   +-- AdFileMissing                the file does not exist (normal for .site.ad)
    +-- StateError                       the glidein's own state files
    +-- AgentLinkError                   the link between a glidein's hooks and its agent
    +-- CondorError                      HTCondor (daemons, tools, bindings) failed
    +-- DhtError                         the site DHT
    +-- CacheError                       the worker-node cache
    |   +-- CacheFullError               a file does not fit
    +-- CatalogError                     a Trivial File Catalog
    +-- TransferError                    a peer or SE transfer failed or delivered bad data
    +-- ClassAdError                     a ClassAd expression or ad does not parse
    +-- PilotCheckError                  the pilot's environment check failed
    +-- TaskQueueError                   the Task Queue failed or could not be reached (HTTP 503)
        +-- TaskQueueNotFound            no such pilot/task/workflow, or the pilot is gone (404)
        +-- TaskQueueAuthError           no valid token for the call (401)
        |   +-- TaskQueueForbidden       a valid token that may not do this (403)
        +-- TaskQueueTlsError            the Task Queue's certificate is not trusted
        +-- StaleMasterError             a stale master's call: another pilot holds the role (409)
        +-- TaskQueueRequestError        exit 2: the TQ refused the request's content (422)
            +-- WorkflowError            a workflow file is malformed (task and field named)

The Task Queue's HTTP statuses are one table, ``TQ_HTTP_STATUS``, read by both the service
(``tq_http_status``) and the client (``tq_error_for_status``).
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


class RankMatrixError(UsageError):
    """A rank matrix (Delgado Peris 2014 §III.C: row = task, column = pilot) is malformed: ragged
    rows, a rank that is not a finite number, an index out of range, a task reported twice."""


class MissingDependencyError(ConfigError):
    """An optional package is not installed: numpy/scipy for the optimal assignment, classad2 for
    ClassAd expressions on a worker node's bare Python."""


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


class AgentLinkError(GlideinExtError):
    """The link between a glidein's HTCondor hooks and its pilot agent (the unix socket in the
    start directory) is unsafe, absent, or answered something malformed."""


class DhtError(GlideinExtError):
    """The site DHT failed: no contact answered, a key was not found, or a message was too large."""


class CacheError(GlideinExtError):
    """The worker-node data cache (Hasham 2011, IV.B-IV.D) cannot do what was asked."""


class CacheFullError(CacheError):
    """A file does not fit: larger than the cache, or the space is held by pinned files."""


class CatalogError(GlideinExtError):
    """A Trivial File Catalog (storage.xml / storage.json) is malformed or has no matching rule."""


class TransferError(GlideinExtError):
    """A file transfer (peer file server or storage element) failed or delivered bad data."""


class ClassAdError(GlideinExtError):
    """A ClassAd expression or ad could not be parsed (Hasham 2011 §IV-E: Requirements and Rank)."""


class TaskQueueError(GlideinExtError):
    """The Task Queue service refused a request, failed, or could not be reached (Hasham 2011
    §IV)."""


class TaskQueueRequestError(TaskQueueError):
    """The Task Queue refused what a request carried (HTTP 422): fix the request, do not retry."""

    exit_code = 2


class WorkflowError(TaskQueueRequestError):
    """A workflow file is malformed; ``task`` and ``field`` say where (nothing was submitted)."""

    def __init__(self, reason: str, task: str | None = None, field: str | None = None) -> None:
        self.reason = reason
        self.task = task
        self.field = field
        where = []
        if task is not None:
            where.append(f"task {task!r}")
        if field is not None:
            where.append(f"field {field!r}")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {reason}" if prefix else reason)


class PilotCheckError(GlideinExtError):
    """A pilot's environment check failed; the pilot runs nothing (Hasham 2011 §IV)."""


class TaskQueueNotFound(TaskQueueError):
    """The Task Queue knows no such pilot, task or workflow (or the pilot is gone)."""


class TaskQueueAuthError(TaskQueueError):
    """A request to the Task Queue had no valid token for what it asked."""


class TaskQueueForbidden(TaskQueueAuthError):
    """The token is valid but may not do this (HTTP 403): another pilot's id, another site, a
    revoked or expired credential.  Nothing was changed; retrying will not help."""


class TaskQueueTlsError(TaskQueueError):
    """The Task Queue's TLS certificate is not trusted (another CA, another host name): the
    client refuses to talk to it; retrying will not help."""


class StaleMasterError(TaskQueueError):
    """A distributed site's master call carried an epoch that is not the site's (HTTP 409):
    another pilot holds the master role now; this one must step down (Delgado Peris 2014 §III.B)."""


class SitesFileError(ConfigError):
    """The PilotMonitor's sites file is malformed; ``site`` and ``field`` say where."""

    exit_code = 2

    def __init__(
        self, path: str, reason: str, site: str | None = None, field: str | None = None
    ) -> None:
        self.path = path
        self.reason = reason
        self.site = site
        self.field = field
        where = [path]
        if site is not None:
            where.append(f"site {site!r}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(": ".join([", ".join(where), reason]))


# The one table between the Task Queue's errors and HTTP statuses: the service answers an error with
# the status of its first class listed here (any other TaskQueueError: 503), and the client raises
# the class listed for a status (another 4xx or a 5xx: TaskQueueError).  Subclasses come first.
TQ_HTTP_STATUS: tuple[tuple[type[TaskQueueError], int], ...] = (
    (TaskQueueForbidden, 403),
    (TaskQueueAuthError, 401),
    (TaskQueueNotFound, 404),
    (StaleMasterError, 409),
    (TaskQueueRequestError, 422),
)
TQ_UNAVAILABLE = 503  # any other Task Queue failure: the client fails over to another instance


def tq_http_status(error: TaskQueueError) -> int:
    """The HTTP status the Task Queue answers ``error`` with (``TQ_HTTP_STATUS``)."""
    for kind, status in TQ_HTTP_STATUS:
        if isinstance(error, kind):
            return status
    return TQ_UNAVAILABLE


def tq_error_for_status(status: int) -> type[TaskQueueError] | None:
    """The error a client raises for an HTTP ``status`` (``TQ_HTTP_STATUS``); None: not listed."""
    for kind, listed in TQ_HTTP_STATUS:
        if listed == status:
            return kind
    return None
