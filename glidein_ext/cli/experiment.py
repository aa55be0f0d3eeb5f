"""`glidein-ext experiment NAME --out DIR`: run one of the experiments that mirror the papers'
figures on the simulator (glidein_ext.sim) and write its CSV files, PNG figures and notes.

The simulator's packages come with the ``[experiments]`` extra: a missing simpy (or htcondor's
classad2) makes the command unavailable with one line (``cli.LazyGroup``), a missing matplotlib
is refused before any run."""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import click

from glidein_ext.errors import MissingDependencyError, UsageError
from glidein_ext.sim.calibration import REFERENCE, CostModel, calibrate
from glidein_ext.sim.experiments import EXPERIMENTS, find
from glidein_ext.sim.experiments.base import run_jobs, run_parameters


@dataclass(eq=False)
class ProgressLine:
    """Progress as lines (stderr not a terminal): ``NAME: k/N runs, E s, about R s left`` at
    the first run's end, then at most every ``every`` seconds, and at the last."""

    name: str
    total: int
    say: Callable[[str], None]
    every: float = 10.0
    clock: Callable[[], float] = time.monotonic
    done: int = field(default=0, init=False)
    started: float = field(init=False)
    said_at: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def advance(self, steps: int) -> None:
        self.done += steps
        now = self.clock()
        due = self.said_at is None or now - self.said_at >= self.every
        if not due and self.done < self.total:
            return
        self.said_at = now
        elapsed = now - self.started
        left = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        tail = f", about {left:.0f} s left" if self.done < self.total else ""
        self.say(f"{self.name}: {self.done}/{self.total} runs, {elapsed:.0f} s{tail}")


@click.command()
@click.argument("name", required=False)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Directory to write.")
@click.option("--seed", type=int, default=0, show_default=True, help="First seed of the runs.")
@click.option("--quick", is_flag=True, help="Small sizes and one seed (what CI runs).")
@click.option("--list", "listing", is_flag=True, help="Name the experiments, one line each.")
@click.option(
    "--costs",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="A calibration (JSON) to reuse instead of measuring the matcher here.",
)
@click.option(
    "--reference-costs", is_flag=True, help="The development machine's calibration (reproducible)."
)
def experiment(
    name: str | None,
    out_dir: str | None,
    seed: int,
    quick: bool,
    listing: bool,
    costs: str | None,
    reference_costs: bool,
) -> None:
    """Run experiment NAME (see --list) and write its results into --out."""
    if listing:
        for known in EXPERIMENTS.values():
            click.echo(f"{known.name:<20} {known.summary}")
        return
    if name is None:
        raise UsageError("name an experiment (glidein-ext experiment --list)")
    found = find(name)
    if found is None:
        raise UsageError(f"unknown experiment {name!r}; known: {', '.join(EXPERIMENTS)}")
    if out_dir is None:
        raise UsageError("--out DIR is required")
    if seed < 0:
        raise UsageError("--seed must be 0 or more")
    if importlib.util.find_spec("matplotlib") is None:
        raise MissingDependencyError(
            "glidein-ext experiment draws its figures with matplotlib, not installed here: "
            "pip install '.[experiments]' in a glidein-ext checkout"
        )
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {out}: {exc.strerror}") from exc
    if costs is not None:
        try:
            model = CostModel.from_file(Path(costs))
        except (OSError, ValueError, TypeError) as exc:
            raise UsageError(f"cannot read the calibration {costs}: {exc}") from exc
    elif reference_costs:
        model = REFERENCE
    else:
        model = calibrate()
    (out / "calibration.json").write_text(model.to_json() + "\n", encoding="utf-8")
    jobs = found.jobs(quick, seed)
    started = time.monotonic()
    if sys.stderr.isatty():
        with click.progressbar(length=len(jobs), label=name, file=sys.stderr) as bar:
            results = run_jobs(jobs, model, bar.update)
    else:  # a log file or a pipe: a line now and then (a bar would show only at the end)
        progress = ProgressLine(name, len(jobs), lambda line: click.echo(line, err=True))
        results = run_jobs(jobs, model, progress.advance)
    notes = found.report(results, out, model)
    source = (
        f"the calibration {costs}"
        if costs is not None
        else "the reference calibration"
        if reference_costs
        else "measured on this machine"
    )
    head = run_parameters(name, quick, seed, source, jobs)
    (out / "notes.txt").write_text(
        "".join(f"{note}\n" for note in [*head, *notes]), encoding="utf-8"
    )
    for note in notes:
        click.echo(note)
    written = sorted(p.name for p in out.iterdir())
    click.echo(
        f"{name}: {len(jobs)} run(s) in {time.monotonic() - started:.0f} s; "
        f"wrote {', '.join(written)} in {out}"
    )
