"""How much one startd cron run (and one job hook) costs, against a bare `python -c pass`.

    .venv/bin/python bench/cron_bench.py [--runs 30]

The startd runs `glidein-ext cron` every period in every glidein, and the starter runs the job
hooks at every job start and exit, so their start-up cost matters.  Each command runs --runs times
as a fresh process (as HTCondor runs it); the table shows median and worst wall time and peak RSS
(from wait4), beside the same interpreter doing nothing.  Targets: cron under 150 ms and 40 MB.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from glidein_ext.glidein.info import GlideinInfo, save_info

TARGET_MS = 150.0
TARGET_MB = 40.0


@dataclass
class Sample:
    wall_ms: float
    rss_mb: float


# A small go-between (python -S, ~8 MB) forks and execs the command and reports its rusage: a
# child forked from this bigger process would inherit this process's peak RSS as its own.
_SPAWNER = """
import os, sys, time
t = time.perf_counter()
pid = os.fork()
if pid == 0:
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), (time.perf_counter() - t) * 1000, usage.ru_maxrss)
"""


def run_once(argv: list[str], stdin: bytes | None) -> Sample:
    proc = subprocess.run(
        [sys.executable, "-S", "-c", _SPAWNER, *argv],
        input=stdin or b"",
        capture_output=True,
        check=True,
    )
    code, wall_ms, maxrss_kb = proc.stdout.split()
    if int(code) != 0:
        raise SystemExit(f"{argv} exited {int(code)}")
    return Sample(float(wall_ms), int(maxrss_kb) / 1024)


def measure(argv: list[str], runs: int, stdin: bytes | None = None) -> list[Sample]:
    run_once(argv, stdin)  # warm the page cache and the .pyc files
    return [run_once(argv, stdin) for _ in range(runs)]


def job_ad(n: int, now: int) -> bytes:
    return (
        f'GlobalJobId = "bench#{n}.0#1"\nClusterId = {n}\nProcId = 0\nCpusProvisioned = 1\n'
        f"JobCurrentStartDate = {now}\nMaxWallTimeMins = 60\nEstimatedWallTimeMins = 30\n"
    ).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="3 runs (does it run; not timed)")
    args = parser.parse_args()
    if args.quick:
        args.runs = 3
    py = sys.executable
    with tempfile.TemporaryDirectory() as start_dir:
        now = int(time.time())
        save_info(start_dir, GlideinInfo(cpus=8, start_time=now - 3600, todie=now + 86400))
        with open(os.path.join(start_dir, ".site.ad"), "w") as handle:
            handle.write("VACATE_DESIRED = false\n")
        ge = [py, "-m", "glidein_ext"]
        # Four running jobs in the table, as a busy glidein has.
        for n in range(4):
            run_once([*ge, "hook", "prepare-job", "--start-dir", start_dir], job_ad(n, now))
        rows = [
            ("python -c pass (baseline)", measure([py, "-c", "pass"], args.runs)),
            ("glidein-ext cron", measure([*ge, "cron", "--start-dir", start_dir], args.runs)),
            (
                "glidein-ext hook prepare-job",
                measure(
                    [*ge, "hook", "prepare-job", "--start-dir", start_dir],
                    args.runs,
                    job_ad(99, now),
                ),
            ),
        ]
    print(f"{'command':<32} {'median ms':>10} {'max ms':>8} {'peak RSS MB':>12}")
    for name, samples in rows:
        walls = [s.wall_ms for s in samples]
        rss = max(s.rss_mb for s in samples)
        print(f"{name:<32} {statistics.median(walls):>10.1f} {max(walls):>8.1f} {rss:>12.1f}")
    cron = rows[1][1]
    base = rows[0][1]
    cron_ms = statistics.median(s.wall_ms for s in cron)
    cron_mb = max(s.rss_mb for s in cron)
    over = cron_ms - statistics.median(s.wall_ms for s in base)
    print(
        f"\ncron: {cron_ms:.1f} ms median ({over:+.1f} ms over the bare interpreter), "
        f"{cron_mb:.1f} MB peak; targets {TARGET_MS:.0f} ms and {TARGET_MB:.0f} MB: "
        f"{'met' if cron_ms < TARGET_MS and cron_mb < TARGET_MB else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
