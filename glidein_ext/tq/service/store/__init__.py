"""The Task Queue's state: the database (every change committed first) and the matcher in memory.

Each operation of the pilot protocol (Hasham 2011 §IV, IV-D, IV-E) is one transaction; the in-memory
Matcher is updated only after the commit and is rebuilt from the database at start, so a TQ killed
at any moment loses no task.  Completions are keyed by (task, attempt): a repeated or stale report
is answered but never counted twice.  One lock serialises the operations of one TQ process,
and guards the matcher (also after a commit: a pool's listener updates it from another thread).

Several TQ processes may share one PostgreSQL database, each with its own matcher kept in step
with the others' changes by notification (``pool``, ``tq.service.pool.notify``).  A task is handed
out by a conditional update (``state = 'queued'``) of a row no other transaction holds (``SKIP
LOCKED``): of two processes choosing the same task, the second skips it (or, once the first has
committed, updates nothing) and chooses again: both can never win.  Pilot
rows are locked (``SELECT ... FOR UPDATE``) before task rows in every operation, so a reaper in
another process cannot requeue a task while it is being assigned, and a repeated completion sent
through two processes is counted once.  SQLite ignores the row locks (it has one writer anyway).

The parts, one concept each, sharing ``core.StoreCore`` (engine, matcher, lock, transaction):
``workflows`` (submission), ``pilots`` (register, request, heartbeat, deregister, reap),
``completions`` (a task's end), ``bookkeeping`` (the PilotMonitor's submissions and site counts),
``views`` (status, task rows), ``sites`` (the site DHT and the run's counters, Delgado Peris 2014),
``claim`` (a distributed site's master role), ``master`` (the master's ``sync`` and
``assign``), ``offers`` (what the master is offered), ``credentials`` (per-pilot
credentials) and ``pool`` (the matcher kept in step with other instances, Lee 2003).
``Store`` (``facade``) owns the shared state and composes the parts, each a plain class given
what it needs; every public method of ``Store`` is one transaction, in which the parts work.
"""

from __future__ import annotations

from glidein_ext.tq.service.store.facade import Store
from glidein_ext.tq.service.store.views import TaskRow

__all__ = ["Store", "TaskRow"]
