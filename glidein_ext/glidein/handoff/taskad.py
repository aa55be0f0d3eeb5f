r"""A Task Queue task as the job ad a glidein's FETCH_WORK hook prints (pure).

What the startd and the starter need to run it (HTCondor's fetched-work job ad, the same
attributes as a COD job): ``Cmd`` (an absolute path: the starter runs it, no shell, no PATH
search), ``Arguments`` and ``Environment`` in HTCondor's "new" syntax, ``Iwd`` (the task's own
directory in the agent's work area: a fetched job has no file transfer, it runs there), ``Out`` /
``Err``, ``Owner`` (the glidein's user), and ``RequestCpus`` / ``RequestMemory`` / ``RequestDisk``
(the partitionable slot carves a dynamic slot of that size).  The task is named by
``GlideinExtTqTask`` / ``GlideinExtTqAttempt`` (the hooks report on it by these) and a
``GlobalJobId`` of its own (the glidein's job table keys on it), and carries the hand-off's
secret (``GlideinExtTqSecret``: the hooks send it back, so that a hook call names a task it was
handed; it is not in the job's environment).  Its ``max_runtime`` becomes
``AllowedJobDuration`` and ``MaxJobRetirementTime``, which the glidein's job-time sources read
(``glidein_ext.glidein.jobtimes``: the default max-end source list starts with
``AllowedJobDuration:s``), so `.pilot.ad` stays true for fetched work, and a retiring glidein
waits for the task no longer than it may run.

No string of a task can add or change an attribute: the agent builds the ad as an object (a
mapping from the fixed attribute names of :data:`JOB_ATTRIBUTES` to booleans, integers and
strings), it travels to the hook as JSON, and the hook prints it with :func:`render_ad`, one
attribute a line.  A string value is quoted by :func:`classad_string`, which refuses every
character that is not printable (``str.isprintable``: the C0 and C1 controls, the line and
paragraph separators U+2028/U+2029, NEL U+0085, format characters, unassigned code points...), so
no value can hold a line end of any kind, and escapes the double quote.  The old ClassAd syntax the
startd reads knows no other escape (a backslash is a plain character, also before the closing
quote: HTCondor reads ``"a\"`` at the end of a line as ``a\``); the tests check the quoting against
HTCondor's own parser for arbitrary printable strings.

Python 3.9, standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Union

TASK_ATTR = "GlideinExtTqTask"
ATTEMPT_ATTR = "GlideinExtTqAttempt"
SECRET_ATTR = "GlideinExtTqSecret"  # noqa: S105 (an attribute name)
NAME_ATTR = "GlideinExtTqName"
LANE_ATTR = "GlideinExtTqLane"
VANILLA = 5  # JobUniverse
_BARE_WORD = re.compile(r"^[A-Za-z0-9_./:=@%+,-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET = re.compile(r"^[0-9a-f]{32,128}$")

Scalar = Union[bool, int, str]

# Every attribute of a fetched task's job ad, in the order it is printed: the hook prints these
# and nothing else.
JOB_ATTRIBUTES = (
    "MyType",
    "TargetType",
    "JobUniverse",
    "Cmd",
    "Arguments",
    "Environment",
    "Iwd",
    "In",
    "Out",
    "Err",
    "Owner",
    "ClusterId",
    "ProcId",
    "GlobalJobId",
    "QDate",
    "EnteredCurrentStatus",
    "JobStatus",
    "Requirements",
    "RequestCpus",
    "RequestMemory",
    "RequestDisk",
    "AllowedJobDuration",
    "MaxJobRetirementTime",
    TASK_ATTR,
    ATTEMPT_ATTR,
    SECRET_ATTR,
    NAME_ATTR,
    LANE_ATTR,
)


@dataclass(frozen=True)
class TaskJob:
    """Everything the job ad says about one task attempt."""

    task_id: int
    attempt: int
    name: str
    executable: str  # absolute
    arguments: Sequence[str]
    iwd: str
    stdout: str
    stderr: str
    owner: str
    global_job_id: str
    submitted: int  # unix time
    max_runtime: int  # seconds
    request_cpus: int = 1
    request_memory: int = 128  # MB
    request_disk: int = 1024 * 1024  # KiB
    lane: int = 0
    environment: Mapping[str, str] = field(default_factory=dict)
    secret: str = "0" * 32  # the hand-off's secret (hex)


def printable_problem(value: str) -> str | None:
    """Why ``value`` cannot be a job ad string (a character that is not printable), or None."""
    for char in value:
        if not char.isprintable():
            return f"character U+{ord(char):04X} is not printable and cannot go into a job ad"
    return None


def classad_string(value: str) -> str:
    """A string literal of the old ClassAd syntax (what the startd parses from a hook): only a
    double quote is escaped (a backslash is a plain character there); ValueError for any
    character that is not printable (a line end of any kind among them)."""
    problem = printable_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return '"' + value.replace('"', '\\"') + '"'


def _word(value: str) -> str:
    """One word of the "new" arguments/environment syntax: bare, or in single quotes ('' inside)."""
    if value and _BARE_WORD.match(value):
        return value
    return "'" + value.replace("'", "''") + "'"


def arguments_string(arguments: Sequence[str]) -> str:
    """HTCondor's new-syntax ``Arguments`` value (words separated by spaces)."""
    return " ".join(_word(arg) for arg in arguments)


def environment_string(environment: Mapping[str, str]) -> str:
    """HTCondor's new-syntax ``Environment`` value: NAME=value pairs, values quoted as words."""
    pairs = []
    for name in sorted(environment):
        if not _ENV_NAME.match(name):
            raise ValueError(f"environment variable name {name!r} is not a plain name")
        pairs.append(f"{name}={_word(environment[name])}")
    return " ".join(pairs)


def job_ad(job: TaskJob) -> dict[str, Scalar]:
    """The job ad as an object: every attribute of :data:`JOB_ATTRIBUTES`, each a boolean, an
    integer or a string (ValueError if a value cannot go into an ad)."""
    if not job.executable.startswith("/"):
        raise ValueError(f"the task's executable must be an absolute path: {job.executable!r}")
    if not _SECRET.match(job.secret):
        raise ValueError("the hand-off's secret must be hexadecimal")
    ad: dict[str, Scalar] = {
        "MyType": "Job",
        "TargetType": "Machine",
        "JobUniverse": VANILLA,
        "Cmd": job.executable,
        "Arguments": arguments_string(job.arguments),
        "Environment": environment_string(job.environment),
        "Iwd": job.iwd,
        "In": "/dev/null",
        "Out": job.stdout,
        "Err": job.stderr,
        "Owner": job.owner,
        "ClusterId": job.task_id,
        "ProcId": job.attempt,
        "GlobalJobId": job.global_job_id,
        "QDate": job.submitted,
        "EnteredCurrentStatus": job.submitted,
        "JobStatus": 1,
        "Requirements": True,
        "RequestCpus": job.request_cpus,
        "RequestMemory": job.request_memory,
        "RequestDisk": job.request_disk,
        # The glidein's job-time sources (max end) and the retirement a draining glidein grants.
        "AllowedJobDuration": job.max_runtime,
        "MaxJobRetirementTime": job.max_runtime,
        TASK_ATTR: job.task_id,
        ATTEMPT_ATTR: job.attempt,
        SECRET_ATTR: job.secret,
        NAME_ATTR: job.name,
        LANE_ATTR: job.lane,
    }
    render_ad(ad)  # every value checked now, where the task can still fail cleanly
    return ad


def _literal(name: str, value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        try:
            return classad_string(value)
        except ValueError as exc:
            raise ValueError(f"attribute {name}: {exc}") from None
    raise ValueError(f"attribute {name} is not a boolean, an integer or a string")


def render_ad(ad: Mapping[str, object]) -> str:
    """The job ad in the old ClassAd syntax, one attribute a line, exactly the attributes of
    :data:`JOB_ATTRIBUTES` in their order (ValueError for anything else: another attribute, a
    missing one, a value of another type, a string that is not printable)."""
    if not isinstance(ad, Mapping):
        raise ValueError("the job ad is not an object")
    if set(ad) != set(JOB_ATTRIBUTES) or len(ad) != len(JOB_ATTRIBUTES):
        extra = sorted(str(name)[:40] for name in set(ad) - set(JOB_ATTRIBUTES))
        missing = sorted(set(JOB_ATTRIBUTES) - set(ad))
        raise ValueError(f"the job ad has other attributes (extra {extra}, missing {missing})")
    return "".join(f"{name} = {_literal(name, ad[name])}\n" for name in JOB_ATTRIBUTES)


def render(job: TaskJob) -> str:
    """The job ad's text (what the hook prints for ``job``)."""
    return render_ad(job_ad(job))
