"""The glidein's running jobs: a pure table plus its locked JSON file.

Job hooks add a job at start (PREPARE_JOB) and remove it at exit (JOB_EXIT); the startd cron drops
jobs whose condor_starter is gone (a hook that never fired: a crash, a kill -9), so the table heals
itself within one cron period.  Writers hold an exclusive flock on ``jobs.lock`` for the whole
read-modify-write, so two hooks firing at once never lose an update.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from glidein_ext.adfile import write_text_atomic
from glidein_ext.errors import StateError
from glidein_ext.glidein.info import MAX_STATE_BYTES, ensure_state_dir, state_dir
from glidein_ext.glidein.pilotad import RunningJob

JOBS_FILE = "jobs.json"
LOCK_FILE = "jobs.lock"


@dataclass(frozen=True)
class TrackedJob:
    """A running job and the starter process that runs it."""

    job: RunningJob
    starter_pid: int = 0
    starter_ticks: int | None = None


@dataclass(frozen=True)
class JobTable:
    """Running jobs by id, and the latest job start ever seen (kept after the job ends)."""

    jobs: dict[str, TrackedJob] = field(default_factory=dict)
    last_job_start: int | None = None

    def started(self, tracked: TrackedJob) -> JobTable:
        jobs = dict(self.jobs)
        jobs[tracked.job.job_id] = tracked
        last = max(filter(None, (self.last_job_start, tracked.job.start)), default=None)
        return replace(self, jobs=jobs, last_job_start=last)

    def ended(self, job_id: str) -> JobTable:
        if job_id not in self.jobs:
            return self
        jobs = dict(self.jobs)
        del jobs[job_id]
        return replace(self, jobs=jobs)

    def pruned(self, alive: Callable[[TrackedJob], bool]) -> JobTable:
        kept = {jid: t for jid, t in self.jobs.items() if alive(t)}
        return self if len(kept) == len(self.jobs) else replace(self, jobs=kept)

    def running(self) -> tuple[RunningJob, ...]:
        return tuple(t.job for t in sorted(self.jobs.values(), key=lambda t: t.job.job_id))

    def to_json(self) -> dict[str, Any]:
        return {
            "last_job_start": self.last_job_start,
            "jobs": [
                {"starter_pid": t.starter_pid, "starter_ticks": t.starter_ticks, **asdict(t.job)}
                for t in self.jobs.values()
            ],
        }

    @classmethod
    def from_json(cls, data: Any) -> JobTable:
        if not isinstance(data, dict) or not isinstance(data.get("jobs", []), list):
            raise ValueError("not a job table")
        jobs: dict[str, TrackedJob] = {}
        for item in data.get("jobs", []):
            job = RunningJob(
                job_id=str(item["job_id"]),
                cpus=int(item["cpus"]),
                start=int(item["start"]),
                expected_end=int(item["expected_end"]),
                max_end=int(item["max_end"]),
            )
            ticks = item.get("starter_ticks")
            jobs[job.job_id] = TrackedJob(
                job, int(item.get("starter_pid", 0)), None if ticks is None else int(ticks)
            )
        last = data.get("last_job_start")
        return cls(jobs=jobs, last_job_start=None if last is None else int(last))


def _paths(start_dir: str) -> tuple[str, str]:
    base = state_dir(start_dir)
    return os.path.join(base, JOBS_FILE), os.path.join(base, LOCK_FILE)


def load_table(start_dir: str) -> JobTable:
    """The current table (empty if none was written yet)."""
    path, _ = _paths(start_dir)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_STATE_BYTES + 1)
    except FileNotFoundError:
        return JobTable()
    except OSError as exc:
        raise StateError(f"{path}: {exc.strerror}") from None
    if len(raw) > MAX_STATE_BYTES:
        raise StateError(f"{path}: too large")
    try:
        return JobTable.from_json(json.loads(raw))
    except (ValueError, KeyError, TypeError) as exc:
        raise StateError(f"{path}: malformed job table ({exc})") from None


@contextmanager
def locked(start_dir: str) -> Iterator[None]:
    """Hold the table's exclusive lock."""
    ensure_state_dir(start_dir)
    _, lock_path = _paths(start_dir)
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise StateError(f"{lock_path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def update_table(start_dir: str, change: Callable[[JobTable], JobTable]) -> JobTable:
    """Apply ``change`` to the table under the lock and store the result."""
    with locked(start_dir):
        before = load_table(start_dir)
        table = change(before)
        if table is not before:  # unchanged tables are not rewritten (no fsync per cron run)
            path, _ = _paths(start_dir)
            write_text_atomic(path, json.dumps(table.to_json(), sort_keys=True) + "\n")
        return table
