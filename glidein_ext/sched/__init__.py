"""Pure scheduling cores of Delgado Peris 2014 (Delgado Peris, Hernández, Huedo, "Distributed
scheduling and data sharing in late-binding overlays", III.C): a worker ranks the master's TaskList
(:mod:`~glidein_ext.sched.ranking`), the master gathers the ranks into a matrix
(:mod:`~glidein_ext.sched.matrix`) and assigns at most one task per pilot
(:mod:`~glidein_ext.sched.assign`).

Runs on a worker node's bare Python 3.9: numpy/scipy (the optimal assignment) and classad2 (ClassAd
expressions) are imported lazily, and their absence is a :class:`~glidein_ext.errors.
MissingDependencyError`.
"""
