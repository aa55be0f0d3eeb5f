"""Small shared facts about HTCondor, the one place its errors are translated, and the one place
its daemons (the collector, a schedd) are found.

Nothing here imports the HTCondor bindings: callers import ``htcondor2``/``classad2`` inside their
functions (nothing happens at import, and the startd cron never loads them), hand the module to
:func:`collector`, :func:`schedd` and :func:`schedds`, and wrap the calls in :func:`condor_errors`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from glidein_ext.errors import CondorError, GlideinExtError, UsageError


class JobStatus(enum.IntEnum):
    """A job ad's ``JobStatus`` (HTCondor's job states)."""

    IDLE = 1
    RUNNING = 2
    REMOVED = 3
    COMPLETED = 4
    HELD = 5
    TRANSFERRING_OUTPUT = 6
    SUSPENDED = 7


# Still waiting or running in a schedd's queue.
ALIVE_STATES = (JobStatus.IDLE, JobStatus.RUNNING, JobStatus.TRANSFERRING_OUTPUT)


@contextmanager
def condor_errors(what: str) -> Iterator[None]:
    """Translate whatever the HTCondor bindings raise in the block into ``CondorError(what: ...)``.

    htcondor2 and classad2 raise their own HTCondorException/ClassAdException but also plain
    RuntimeError, ValueError, TypeError and OSError; this is the boundary that turns all of them
    into the project's error, once.  Errors that already are the project's pass through unchanged.
    """
    try:
        yield
    except GlideinExtError:
        raise
    except Exception as exc:
        raise CondorError(f"{what}: {exc}") from exc


def collector(htcondor2: Any, pool: str | None = None) -> Any:
    """The collector of ``pool`` (host[:port]), or the configured one (``COLLECTOR_HOST``)."""
    return htcondor2.Collector(pool) if pool else htcondor2.Collector()


def schedd(htcondor2: Any, pool: str | None = None, name: str | None = None) -> Any:
    """The schedd ``name`` (``SCHEDD_NAME``) as ``pool``'s collector locates it, or the
    collector's default schedd when no name is given."""
    found = collector(htcondor2, pool)
    if name:
        return htcondor2.Schedd(found.locate(htcondor2.DaemonType.Schedd, name))
    return htcondor2.Schedd(found.locate(htcondor2.DaemonType.Schedd))


def schedds(htcondor2: Any, pool: str | None = None) -> Iterator[Any]:
    """Every schedd ``pool``'s collector knows."""
    for location in collector(htcondor2, pool).locateAll(htcondor2.DaemonType.Schedd):
        yield htcondor2.Schedd(location)


def config_value(value: str) -> str:
    """A condor_config macro value, checked to stay on one line (UsageError otherwise)."""
    if "\n" in value or "\r" in value:
        raise UsageError(f"a configuration value may not contain a newline: {value!r}")
    return value


def startd_node_config(
    name: str,
    local_dir: str,
    cpus: int,
    memory_mb: int,
    *,
    base_config: str | None = None,
    static_slots: bool = False,
) -> list[str]:
    """The condor_config lines of a private condor_master + condor_startd (pure).

    Used for a glidein (``glidein-ext wrapper``) and for the sandbox's site execute nodes: its own
    LOCAL_DIR (log, execute, spool), named master and startd, no shared port, one partitionable slot
    with every resource (or one static slot per CPU), and no start-up benchmarks (they take seconds
    of a glidein's life and delay the first cron run).
    """
    lines = []
    if base_config:
        lines.append(f"include : {config_value(base_config)}")
    lines += [
        "LOCAL_CONFIG_FILE =",
        "LOCAL_CONFIG_DIR =",
        f"LOCAL_DIR = {config_value(local_dir)}",
        "LOG = $(LOCAL_DIR)/log",
        "EXECUTE = $(LOCAL_DIR)/execute",
        "SPOOL = $(LOCAL_DIR)/spool",
        "LOCK = $(LOG)",
        "RUN = $(LOG)",
        "DAEMON_LIST = MASTER STARTD",
        "USE_SHARED_PORT = False",
        f"MASTER_NAME = {config_value(name)}",
        f"STARTD_NAME = {config_value(name)}",
        f"NUM_CPUS = {cpus}",
        f"MEMORY = {memory_mb}",
    ]
    if static_slots:
        lines += [
            f"NUM_SLOTS = {cpus}",
            f"NUM_SLOTS_TYPE_1 = {cpus}",
            "SLOT_TYPE_1 = cpus=1",
            "SLOT_TYPE_1_PARTITIONABLE = False",
        ]
    else:
        lines += [
            "NUM_SLOTS = 1",
            "NUM_SLOTS_TYPE_1 = 1",
            "SLOT_TYPE_1 = cpus=100%, mem=100%, disk=100%, swap=100%",
            "SLOT_TYPE_1_PARTITIONABLE = True",
        ]
    lines += ["BENCHMARKS_JOBLIST =", "RunBenchmarks = False"]
    return lines
