"""A discrete-event simulator (SimPy) of the Task Queue, its pilots and their sites, driving the
project's real pure cores: the Task Queue's matcher (classad2, groups, locality, waitForData),
the PilotMonitor's plan, the LRU cache index, the workers' ranking, the master's round book and
assignment, the victim policy, and the run's counters.  Only time is modelled: how long the Task
Queue serves a request (a cost model fitted at start-up from timings of the real matcher,
``sim.calibration``), the network, the storage element (Hasham 2011 Table I) and the tasks' length.

Entry points: :func:`glidein_ext.sim.engine.simulate` (one run) and the experiments that mirror
the papers' figures (``glidein_ext.sim.experiments``, ``glidein-ext experiment``).
"""
