"""The `.pilot.ad` attributes from the pilot's state (pure; Sfiligoi 2013, "Proposed attributes").

The slides define the attributes for a single-CPU pilot; DESIGN.md gives the definitions this
project implements for partitionable multi-core glideins.  A pilot owns C CPUs from its start time
P; running job i has c_i CPUs, start s_i, expected end e_i and guaranteed maximum end m_i; t is now:

=====================  =======================================================================
LAST_JOB_START         latest job start (kept after the job ends; absent before any job started)
FIRST_EXP_JOB_END      min e_i over running jobs (absent when none runs)
LAST_EXP_JOB_END       max e_i (absent when none runs)
LAST_MAX_JOB_END       max m_i (absent when none runs)
USED_FRACTION1k        round(1024 * sum c_i / C)
ADD_UNCOM_TIME1k       min(1024, round(1024 * sum c_i (t - s_i) / (C (t - P))))
ADD_FINAL_EXP_WASTE1k  min(1024, round(1024 * (C (E - t) - sum c_i (e_i - t)) / (C (t - P)))),
                       E = LAST_EXP_JOB_END; 0 when no job runs
PRIORITY_FACTOR        the owner's preference to keep this pilot (higher is better)
CAN_POSTPONE_LAST_JOB  true while the pilot may start new jobs, false once draining
CACHED_INPUT_NEEDED_MB MB of the pilot's cached files that tasks still to run will read (absent
                       when the pilot does not know; ``cache.need``): what vacating it costs in
                       storage-element re-reads (an extension joining Hasham 2011 §IV-E's
                       cache-aware matching to Sfiligoi 2013's victim choice)
=====================  =======================================================================

Choices where the definitions are silent (documented in docs/glidein.md):
- An end time already in the past means "any moment now": m_i and e_i are clamped to at least t,
  and e_i to at most m_i.
- The pilot runtime t - P is taken as at least 1 s (no division by zero at start-up).
- round() is round-half-up, done in exact integer arithmetic; the fractions are clamped to
  [0, 1024].
"""

from __future__ import annotations

from dataclasses import dataclass, field

from glidein_ext.adfile import AdValue, Kind, Schema

LAST_JOB_START = "LAST_JOB_START"
FIRST_EXP_JOB_END = "FIRST_EXP_JOB_END"
LAST_EXP_JOB_END = "LAST_EXP_JOB_END"
LAST_MAX_JOB_END = "LAST_MAX_JOB_END"
USED_FRACTION1K = "USED_FRACTION1k"
ADD_UNCOM_TIME1K = "ADD_UNCOM_TIME1k"
ADD_FINAL_EXP_WASTE1K = "ADD_FINAL_EXP_WASTE1k"
PRIORITY_FACTOR = "PRIORITY_FACTOR"
CAN_POSTPONE_LAST_JOB = "CAN_POSTPONE_LAST_JOB"
CACHED_INPUT_NEEDED_MB = "CACHED_INPUT_NEEDED_MB"

PILOT_AD_SCHEMA = Schema(
    ".pilot.ad",
    {
        LAST_JOB_START: Kind.INT,
        FIRST_EXP_JOB_END: Kind.INT,
        LAST_EXP_JOB_END: Kind.INT,
        LAST_MAX_JOB_END: Kind.INT,
        USED_FRACTION1K: Kind.INT,
        ADD_UNCOM_TIME1K: Kind.INT,
        ADD_FINAL_EXP_WASTE1K: Kind.INT,
        PRIORITY_FACTOR: Kind.INT,
        CAN_POSTPONE_LAST_JOB: Kind.BOOL,
        CACHED_INPUT_NEEDED_MB: Kind.INT,
    },
)

PILOT_AD_FILE = ".pilot.ad"
ONE_K = 1024


@dataclass(frozen=True)
class RunningJob:
    """One running user job as the pilot sees it (times are unix seconds)."""

    job_id: str
    cpus: int
    start: int
    expected_end: int
    max_end: int


@dataclass(frozen=True)
class PilotAdInputs:
    """Everything the .pilot.ad attributes are computed from (Sfiligoi 2013)."""

    cpus: int
    start_time: int
    jobs: tuple[RunningJob, ...] = field(default_factory=tuple)
    last_job_start: int | None = None
    draining: bool = False
    priority_factor: int = 0
    cached_input_needed_mb: int | None = None  # None: unknown, the attribute is left out

    def __post_init__(self) -> None:
        if self.cpus < 1:
            raise ValueError("a pilot owns at least one CPU")


def round_half_up(numerator: int, denominator: int) -> int:
    """round(numerator / denominator), halves up; numerator >= 0, denominator > 0."""
    return (2 * numerator + denominator) // (2 * denominator)


def fraction_1k(numerator: int, denominator: int) -> int:
    """round(1024 * numerator / denominator) clamped to [0, 1024]."""
    if numerator <= 0:
        return 0
    return min(ONE_K, round_half_up(ONE_K * numerator, denominator))


def effective_ends(job: RunningJob, now: int) -> tuple[int, int]:
    """(e_i, m_i) as used in the formulas: past ends mean 'now', and e_i never exceeds m_i."""
    max_end = max(job.max_end, now)
    expected_end = min(max(job.expected_end, now), max_end)
    return expected_end, max_end


def compute_pilot_ad(state: PilotAdInputs, now: int) -> dict[str, AdValue]:
    """The `.pilot.ad` values for ``state`` at time ``now``."""
    ad: dict[str, AdValue] = {}
    starts = [job.start for job in state.jobs]
    if state.last_job_start is not None:
        starts.append(state.last_job_start)
    if starts:
        ad[LAST_JOB_START] = max(starts)

    capacity = state.cpus
    runtime = max(now - state.start_time, 1)
    used = sum(job.cpus for job in state.jobs)
    ad[USED_FRACTION1K] = fraction_1k(used, capacity)

    uncommitted = sum(job.cpus * max(now - job.start, 0) for job in state.jobs)
    ad[ADD_UNCOM_TIME1K] = fraction_1k(uncommitted, capacity * runtime)

    if state.jobs:
        ends = [effective_ends(job, now) for job in state.jobs]
        last_expected = max(e for e, _ in ends)
        ad[FIRST_EXP_JOB_END] = min(e for e, _ in ends)
        ad[LAST_EXP_JOB_END] = last_expected
        ad[LAST_MAX_JOB_END] = max(m for _, m in ends)
        busy_until_end = sum(job.cpus * (e - now) for job, (e, _) in zip(state.jobs, ends))
        waste = capacity * (last_expected - now) - busy_until_end
        ad[ADD_FINAL_EXP_WASTE1K] = fraction_1k(waste, capacity * runtime)
    else:
        ad[ADD_FINAL_EXP_WASTE1K] = 0

    ad[PRIORITY_FACTOR] = state.priority_factor
    ad[CAN_POSTPONE_LAST_JOB] = not state.draining
    if state.cached_input_needed_mb is not None:
        ad[CACHED_INPUT_NEEDED_MB] = max(state.cached_input_needed_mb, 0)
    return ad


def initial_pilot_ad(priority_factor: int = 0) -> dict[str, AdValue]:
    """What the wrapper writes before the HTCondor daemons start (Sfiligoi 2013: USED_FRACTION1k =
    0)."""
    return {
        USED_FRACTION1K: 0,
        ADD_UNCOM_TIME1K: 0,
        ADD_FINAL_EXP_WASTE1K: 0,
        PRIORITY_FACTOR: priority_factor,
        CAN_POSTPONE_LAST_JOB: True,
    }
