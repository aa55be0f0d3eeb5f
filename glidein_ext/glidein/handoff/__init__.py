"""The hand-off of Task Queue tasks from a glidein's pilot agent to its own startd, in one place.

Both ends and everything between them (docs/design.md, "The glidein's hand-off"):

- ``wiring``: what the wrapper sets up (hook launchers, HTCondor configuration, the agent built
  from the pilot settings by ``agent.config``);
- ``agent``: the glidein's agent, ``lanes`` pilot agents (``agent.agent.PilotAgent``) whose
  executor (``executor``) offers each task on the ``board`` (a lock and waits around the pure
  state machine of ``core``) as the job ad of ``taskad``;
- ``server``: the agent's end of the hook link (``link``: a unix socket, one JSON line each way),
  checking its callers by their ancestry (``caller``);
- ``hooks``: the startd's and the starter's hooks, HTCondor's side (short-lived processes).

The pilot agent (``glidein_ext.agent``) knows nothing of this: only this sub-package of
``glidein`` imports it (tests/unit/test_layering.py).  Nothing here is imported eagerly: the hooks
import ``hooks``, ``link`` and ``taskad`` only, and must start fast.  Python 3.9.
"""
