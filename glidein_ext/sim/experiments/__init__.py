"""The experiments that mirror the papers' figures, by name (``glidein-ext experiment --list``).

A name says the paper's subject and what is measured: ``dht-*`` the site DHT's architectures
(Delgado Peris 2014), ``tq-*`` the Task Queue with worker-node caches (Hasham 2011),
``draining-*`` which pilots a site vacates (Sfiligoi 2013), ``grid-scale`` the whole grid.  Each
lists its runs (``Experiment.jobs``), which the caller runs (``base.run_jobs``), and writes its
CSV files, PNG figures and notes (``Experiment.report``)."""

from __future__ import annotations

from glidein_ext.sim.experiments import delgado2014, gridscale, hasham2011, sfiligoi2013
from glidein_ext.sim.experiments.base import Experiment

EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment(
            "dht-scaling",
            "Delgado Peris 2014 fig 2, 3, 4, 7, 8: TQ requests, inter-task delay, turnaround "
            "and hit ratios of the three architectures at 100 to 1,500 pilots",
            delgado2014.scaling_jobs,
            delgado2014.scaling_report,
        ),
        Experiment(
            "dht-timeline",
            "Delgado Peris 2014 fig 5/6: one W1 run of 1,500 pilots and 10,000 tasks in time "
            "(running jobs, TQ requests, inter-task delay, TQ queue), pre-DHT and distributed",
            delgado2014.timeline_jobs,
            delgado2014.timeline_report,
        ),
        Experiment(
            "dht-targets",
            "the targets: the distributed architecture at 1,500 pilots and 10,000 tasks "
            "(requests per task, median inter-task delay, first burst)",
            delgado2014.target_jobs,
            delgado2014.target_report,
        ),
        Experiment(
            "tq-submission",
            "Hasham 2011 fig 7: running jobs over time for W3, direct submission, pilots already "
            "running, PilotMonitor",
            hasham2011.submission_jobs,
            hasham2011.submission_report,
        ),
        Experiment(
            "tq-storage",
            "Hasham 2011 fig 8-11: stage-in time and turnaround under d1f1/d2f2/d3f1/d3f3, cache "
            "against no cache",
            hasham2011.storage_jobs,
            hasham2011.storage_report,
        ),
        Experiment(
            "tq-cache",
            "Hasham 2011 fig 12: cache hit ratio of the cache schemes C1/C2/C3 for W1/W2/W3",
            hasham2011.cache_jobs,
            hasham2011.cache_report,
        ),
        Experiment(
            "tq-grid",
            "Hasham 2011 in full: W1/W2/W3 x d1f1/d2f2/d3f1/d3f3 x no cache/C1/C2/C3 x direct/"
            "running/PilotMonitor (CSV only)",
            hasham2011.grid_jobs,
            hasham2011.grid_report,
        ),
        Experiment(
            "draining-victims",
            "Sfiligoi 2013: the site takes CPUs back mid-workflow; the victim policy (completion, "
            "waste) against the time until the CPUs are free",
            sfiligoi2013.vacate_jobs,
            sfiligoi2013.vacate_report,
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

# The names the experiments had first (by the papers' order in this project), still accepted and
# never listed: scripts and notes that name them keep working.
OLD_NAMES = {
    "seed000-scaling": "dht-scaling",
    "seed000-timeline": "dht-timeline",
    "seed000-targets": "dht-targets",
    "seed001-submission": "tq-submission",
    "seed001-storage": "tq-storage",
    "seed001-cache": "tq-cache",
    "seed001-grid": "tq-grid",
    "seed003-vacate": "draining-victims",
}


def find(name: str) -> Experiment | None:
    """The experiment called ``name`` (or by its old name); None when there is none."""
    return EXPERIMENTS.get(OLD_NAMES.get(name, name))
