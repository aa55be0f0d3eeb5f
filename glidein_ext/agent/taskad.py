"""A Task Queue task as the job ad a glidein's FETCH_WORK hook prints (pure).

What the startd and the starter need to run it (HTCondor's fetched-work job ad, the same
attributes as a COD job): ``Cmd`` (an absolute path: the starter runs it, no shell, no PATH
search), ``Arguments`` and ``Environment`` in HTCondor's "new" syntax, ``Iwd`` (the task's own
directory in the agent's work area: a fetched job has no file transfer, it runs there), ``Out`` /
``Err``, ``Owner`` (the glidein's user), and ``RequestCpus`` / ``RequestMemory`` / ``RequestDisk``
(the partitionable slot carves a dynamic slot of that size).  The task is named by
``GlideinExtTqTask`` / ``GlideinExtTqAttempt`` (the hooks report on it by these) and a
``GlobalJobId`` of its own (the glidein's job table keys on it).  Its ``max_runtime`` becomes
``AllowedJobDuration`` and ``MaxJobRetirementTime``, which the glidein's job-time sources read
(``glidein_ext.glidein.jobtimes``: the default max-end source list starts with
``AllowedJobDuration:s``), so `.pilot.ad` stays true for fetched work, and a retiring glidein
waits for the task no longer than it may run.

Python 3.9, standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from glidein_ext.glidein.fetchhook import ATTEMPT_ATTR, TASK_ATTR

NAME_ATTR = "GlideinExtTqName"
LANE_ATTR = "GlideinExtTqLane"
VANILLA = 5  # JobUniverse
_BARE_WORD = re.compile(r"^[A-Za-z0-9_./:=@%+,-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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


def classad_string(value: str) -> str:
    """A string literal of the old ClassAd syntax (what the startd parses from a hook): only a
    double quote is escaped (a backslash is a plain character there); ValueError for a newline
    or another control character, which one ad line cannot carry."""
    for char in value:
        if (ord(char) < 32 and char != "\t") or char == "\x7f":
            raise ValueError(f"control character {ord(char):#x} cannot go into a job ad")
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


def render(job: TaskJob) -> str:
    """The job ad, old ClassAd syntax, one attribute a line (ValueError if a value cannot go)."""
    if not job.executable.startswith("/"):
        raise ValueError(f"the task's executable must be an absolute path: {job.executable!r}")
    values: list[tuple[str, str]] = [
        ("MyType", classad_string("Job")),
        ("TargetType", classad_string("Machine")),
        ("JobUniverse", str(VANILLA)),
        ("Cmd", classad_string(job.executable)),
        ("Arguments", classad_string(arguments_string(job.arguments))),
        ("Environment", classad_string(environment_string(job.environment))),
        ("Iwd", classad_string(job.iwd)),
        ("In", classad_string("/dev/null")),
        ("Out", classad_string(job.stdout)),
        ("Err", classad_string(job.stderr)),
        ("Owner", classad_string(job.owner)),
        ("ClusterId", str(job.task_id)),
        ("ProcId", str(job.attempt)),
        ("GlobalJobId", classad_string(job.global_job_id)),
        ("QDate", str(job.submitted)),
        ("EnteredCurrentStatus", str(job.submitted)),
        ("JobStatus", "1"),
        ("Requirements", "true"),
        ("RequestCpus", str(job.request_cpus)),
        ("RequestMemory", str(job.request_memory)),
        ("RequestDisk", str(job.request_disk)),
        # The glidein's job-time sources (max end) and the retirement a draining glidein grants.
        ("AllowedJobDuration", str(job.max_runtime)),
        ("MaxJobRetirementTime", str(job.max_runtime)),
        (TASK_ATTR, str(job.task_id)),
        (ATTEMPT_ATTR, str(job.attempt)),
        (NAME_ATTR, classad_string(job.name)),
        (LANE_ATTR, str(job.lane)),
    ]
    return "".join(f"{name} = {value}\n" for name, value in values)
