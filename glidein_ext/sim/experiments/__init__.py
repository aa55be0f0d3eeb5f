"""The experiments that mirror the papers' figures, by name (``glidein-ext experiment --list``).

Each lists its runs (``Experiment.jobs``), which the caller runs (``base.run_jobs``), and writes
its CSV files, PNG figures and notes (``Experiment.report``)."""

from __future__ import annotations

from glidein_ext.sim.experiments import gridscale, seed000, seed001, seed003
from glidein_ext.sim.experiments.base import Experiment

EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment(
            "seed000-scaling",
            "Delgado Peris 2014 fig 2, 3, 4, 7, 8: TQ requests, inter-task delay, turnaround "
            "and hit ratios of the three architectures at 100 to 1,500 pilots",
            seed000.scaling_jobs,
            seed000.scaling_report,
        ),
        Experiment(
            "seed000-timeline",
            "Delgado Peris 2014 fig 5/6: one W1 run of 1,500 pilots and 10,000 tasks in time "
            "(running jobs, TQ requests, inter-task delay, TQ queue), pre-DHT and distributed",
            seed000.timeline_jobs,
            seed000.timeline_report,
        ),
        Experiment(
            "seed000-targets",
            "the targets: the distributed architecture at 1,500 pilots and 10,000 tasks "
            "(requests per task, median inter-task delay, first burst)",
            seed000.target_jobs,
            seed000.target_report,
        ),
        Experiment(
            "seed001-submission",
            "Hasham 2011 fig 7: running jobs over time for W3, direct submission, pilots already "
            "running, PilotMonitor",
            seed001.submission_jobs,
            seed001.submission_report,
        ),
        Experiment(
            "seed001-storage",
            "Hasham 2011 fig 8-11: stage-in time and turnaround under d1f1/d2f2/d3f1/d3f3, cache "
            "against no cache",
            seed001.storage_jobs,
            seed001.storage_report,
        ),
        Experiment(
            "seed001-cache",
            "Hasham 2011 fig 12: cache hit ratio of the cache schemes C1/C2/C3 for W1/W2/W3",
            seed001.cache_jobs,
            seed001.cache_report,
        ),
        Experiment(
            "seed001-grid",
            "Hasham 2011 in full: W1/W2/W3 x d1f1/d2f2/d3f1/d3f3 x no cache/C1/C2/C3 x direct/"
            "running/PilotMonitor (CSV only)",
            seed001.grid_jobs,
            seed001.grid_report,
        ),
        Experiment(
            "seed003-vacate",
            "Sfiligoi 2013: the site takes CPUs back mid-workflow; the victim policy (completion, "
            "waste) against the time until the CPUs are free",
            seed003.vacate_jobs,
            seed003.vacate_report,
        ),
        Experiment(
            "grid-scale",
            "the CMS global pool (100 sites, 150,000 pilots, 1,000,000 tasks): Task Queue "
            "instances each architecture needs (first burst < 60 s, median delay < 1 s), by "
            "per-call cost (aggregate model, checked against the simulator at a small size)",
            gridscale.gridscale_jobs,
            gridscale.gridscale_report,
        ),
    )
}
