"""Draining waste: which pilot should a site drain? (Sfiligoi 2013, "Selecting the cooperative
victim")

    .venv/bin/python bench/draining_bench.py [--seeds 5] [--hours 24]

The paper's example site: 2400 CPUs held by 300 eight-core pilots, each core running single-core
jobs back to back, with mixed lengths averaging 4 h (40% ~30 min, 40% ~4 h, 20% ~11 h,
log-normal, capped at 24 h, the site's maximum job length).  Pilots report good-faith expected
ends (the true length times log-normal noise, sigma 0.3).  After a 48 h warm-up the owner VO
reclaims one pilot's worth of cores (8 CPUs) every 15 minutes for --hours hours.  Each policy
picks the pilot to give up:

  random hard kill   a random pilot, killed now: badput = the work its running jobs lose
  random graceful    a random pilot, drained: badput = idle core-time until its last job ends
  condor_defrag      DEFRAG_RANK's default -ExpectedMachineGracefulDrainingBadput, over whole
                     pilots: the startd's estimate (jobs run out the retirement time, 24 h)
  ours (waste)       glidein_ext.site.victims with the pilots' ADD_FINAL_EXP_WASTE1k, computed
                     by glidein_ext.glidein.pilotad from the expected ends (the real code)

Badput is measured with the true job ends; the same workload and the same seed for each policy.
Writes bench/results/draining.md and, if matplotlib is installed, bench/results/draining.png.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from glidein_ext.glidein.pilotad import (
    ADD_FINAL_EXP_WASTE1K,
    PilotAdInputs,
    RunningJob,
    compute_pilot_ad,
)
from glidein_ext.site.pilots import Pilot
from glidein_ext.site.victims import Policy, choose_victims

H = 3600
CPUS = 2400
CORES_PER_PILOT = 8
MAX_JOB = 24 * H
WARMUP = 48 * H
INTERVAL = 15 * 60
RESULTS = Path(__file__).resolve().parent / "results"
MIX = ((0.4, 0.5 * H), (0.4, 4 * H), (0.2, 11 * H))  # (weight, mean length): mean 4 h
SIGMA_LEN, SIGMA_EST = 0.6, 0.3


@dataclass(frozen=True)
class Job:
    start: int
    end: int
    expected_end: int


def job_length(rng: random.Random) -> int:
    mean = rng.choices([m for _, m in MIX], weights=[w for w, _ in MIX])[0]
    mu = math.log(mean) - SIGMA_LEN**2 / 2  # log-normal with that mean
    return max(60, min(MAX_JOB, int(rng.lognormvariate(mu, SIGMA_LEN))))


def core_jobs(rng: random.Random, horizon: int) -> list[Job]:
    """Back-to-back jobs on one core from -WARMUP to past ``horizon``."""
    jobs, t = [], -WARMUP - rng.randrange(MAX_JOB)
    while t < horizon:
        length = job_length(rng)
        est = max(60, int(length * rng.lognormvariate(-(SIGMA_EST**2) / 2, SIGMA_EST)))
        jobs.append(Job(t, t + length, t + min(est, MAX_JOB)))
        t += length
    return jobs


def running(jobs: list[Job], t: int) -> Job:
    return next(j for j in jobs if j.start <= t < j.end)


@dataclass
class SimPilot:
    name: str
    start: int
    cores: list[list[Job]]

    def at(self, t: int) -> list[Job]:
        return [running(c, t) for c in self.cores]


def hard_kill_badput(p: SimPilot, t: int) -> int:
    return sum(t - j.start for j in p.at(t))


def graceful_badput(p: SimPilot, t: int) -> int:
    ends = [j.end for j in p.at(t)]
    return sum(max(ends) - e for e in ends)


def defrag_badput_estimate(p: SimPilot, t: int) -> int:
    # ExpectedMachineGracefulDrainingBadput: each job runs out its retirement time, then is lost.
    return sum(max(MAX_JOB, t - j.start) for j in p.at(t))


def as_site_pilot(p: SimPilot, t: int) -> Pilot:
    jobs = tuple(
        RunningJob(f"{p.name}.{i}", 1, j.start, j.expected_end, j.start + MAX_JOB)
        for i, j in enumerate(p.at(t))
    )
    ad = compute_pilot_ad(PilotAdInputs(cpus=CORES_PER_PILOT, start_time=p.start, jobs=jobs), t)
    waste = ad[ADD_FINAL_EXP_WASTE1K]
    assert isinstance(waste, int)
    return Pilot(
        slot=p.name, owner="vo@site", cpus=CORES_PER_PILOT, waste1k=waste, can_postpone=True
    )


Chooser = Callable[[list[SimPilot], int, random.Random], SimPilot]


def choose_random(pilots: list[SimPilot], t: int, rng: random.Random) -> SimPilot:
    return rng.choice(pilots)


def choose_defrag(pilots: list[SimPilot], t: int, rng: random.Random) -> SimPilot:
    best = min(defrag_badput_estimate(p, t) for p in pilots)
    return rng.choice([p for p in pilots if defrag_badput_estimate(p, t) == best])


def choose_ours(pilots: list[SimPilot], t: int, rng: random.Random) -> SimPilot:
    by_name = {p.name: p for p in pilots}
    selection = choose_victims(
        [as_site_pilot(p, t) for p in pilots], {}, CORES_PER_PILOT, Policy.WASTE
    )
    return by_name[selection.victims[0].pilot.slot]


POLICIES: dict[str, tuple[Chooser, Callable[[SimPilot, int], int]]] = {
    "random hard kill": (choose_random, hard_kill_badput),
    "random graceful": (choose_random, graceful_badput),
    "condor_defrag default rank": (choose_defrag, graceful_badput),
    "ours (waste policy)": (choose_ours, graceful_badput),
}


def run(seed: int, hours: int) -> dict[str, tuple[float, float]]:
    """{policy: (badput core-hours, mean hours until the cores are free)} for one seed."""
    horizon = hours * H + 2 * MAX_JOB
    workload = random.Random(seed)
    pilots = [
        SimPilot(
            f"pilot{i:03d}", -WARMUP, [core_jobs(workload, horizon) for _ in range(CORES_PER_PILOT)]
        )
        for i in range(CPUS // CORES_PER_PILOT)
    ]
    out: dict[str, tuple[float, float]] = {}
    for name, (chooser, badput) in POLICIES.items():
        rng = random.Random(seed * 1000 + 7)
        left = list(pilots)
        total, delays = 0, []
        for t in range(0, hours * H, INTERVAL):
            victim = chooser(left, t, rng)
            left.remove(victim)
            total += badput(victim, t)
            hard = name.endswith("hard kill")
            delays.append(0 if hard else max(j.end for j in victim.at(t)) - t)
        out[name] = (total / H, statistics.mean(delays) / H)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--quick", action="store_true", help="1 seed, 6 hours (does it run)")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.hours = 1, 6
    runs = [run(seed, args.hours) for seed in range(1, args.seeds + 1)]
    events = args.hours * H // INTERVAL
    lines = [
        f"Draining badput, {CPUS} CPUs in {CPUS // CORES_PER_PILOT} {CORES_PER_PILOT}-core pilots, "
        f"4 h mean jobs; {events} pilots reclaimed (one per 15 min over {args.hours} h); "
        f"mean ± sd over {args.seeds} seeds",
        "",
        "| policy | badput (core-hours) | per pilot (core-hours) | mean wait for cores (h) |",
        "| --- | ---: | ---: | ---: |",
    ]
    means: dict[str, float] = {}
    for name in POLICIES:
        bad = [r[name][0] for r in runs]
        wait = [r[name][1] for r in runs]
        means[name] = statistics.mean(bad)
        sd = statistics.stdev(bad) if len(bad) > 1 else 0.0
        lines.append(
            f"| {name} | {means[name]:.0f} ± {sd:.0f} | {means[name] / events:.1f} | "
            f"{statistics.mean(wait):.2f} |"
        )
    cut = 1 - means["ours (waste policy)"] / means["random graceful"]
    lines += ["", f"ours vs random graceful: {100 * cut:.0f}% less badput (target: at least 50%)"]
    text = "\n".join(lines) + "\n"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "draining.md").write_text(text)
    print(text, end="")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot (pip install matplotlib)")
        return
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.barh(list(means), list(means.values()), color=["#c44", "#d96", "#69c", "#4a4"])
    ax.set_xlabel(f"badput, core-hours ({events} pilots reclaimed)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(RESULTS / "draining.png", dpi=120)
    print(f"plot: {RESULTS / 'draining.png'}")


if __name__ == "__main__":
    main()
