"""A Task Queue offer as the TaskList entry the workers rank (``sched.ranking``;
Delgado Peris 2014 §III.C).  Python 3.9, standard library only."""

from __future__ import annotations

from glidein_ext.sched.ranking import InputFile, TaskEntry, TaskSpec
from glidein_ext.tq.client.protocol import TaskOffer


def entry_of(offer: TaskOffer) -> TaskEntry:
    """A Task Queue offer as a TaskList entry (``sched.ranking``)."""
    spec = TaskSpec(
        offer.requirements,
        offer.rank,
        offer.request_cpus,
        offer.request_memory,
        offer.request_disk,
        float(offer.max_runtime),
        tuple(sorted(offer.attributes.items())),
    )
    return TaskEntry(offer.task_id, spec, tuple(InputFile(lfn) for lfn in offer.inputs))
