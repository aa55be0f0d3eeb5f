"""A busy pilot's one call per task: its task's end and its request for the next, in one
transaction (Hasham 2011 §IV-E).

The pilot protocol's late binding is kept: the next task is matched when the pilot asks, which is
now the moment it reports the end of its last one, and the answer carries both.  The completion is
exactly ``complete`` (idempotent per (task, attempt), the site's bookkeeping included) and the
request exactly ``request`` (the pilot's cache list, the task it may already hold), run one after
the other in the caller's transaction, so a failure of either leaves neither done.

The matcher learns a transaction's changes only after its commit (``core``): tasks that this
completion releases are queued in the database but not yet offered to the request that follows
it in the same transaction.  The answer then carries no task, and the pilot asks again at once
with a plain request (``agent``), which finds them.  The files the task produced are told to the
matcher before the choice (as a request's cache list is), so that the pilot's next task may be
one that reads them.
"""

from __future__ import annotations

from glidein_ext.errors import TaskQueueNotFound
from glidein_ext.tq.client.protocol import CompleteAndRequest, CompleteAndRequestAnswer
from glidein_ext.tq.models import TaskState
from glidein_ext.tq.service.store.core import StoreCore, Tx
from glidein_ext.tq.service.store.pilots import PilotProtocol
from glidein_ext.tq.service.store.sites import SiteCoordination


class CompletionThenRequest:
    """``complete_and_request``: works in the caller's transaction, the matcher after its commit
    (but for the produced files, see the module)."""

    def __init__(self, core: StoreCore, sites: SiteCoordination, pilots: PilotProtocol) -> None:
        self.core = core
        self.sites = sites
        self.pilots = pilots

    def complete_and_request(
        self, tx: Tx, pilot_id: int, call: CompleteAndRequest
    ) -> CompleteAndRequestAnswer:
        """The completion's answer and the pilot's next task (None when nothing fits now)."""
        completion = call.completion
        result = self.sites.complete(tx, pilot_id, completion)
        if result.accepted and result.state == TaskState.DONE.value and completion.outputs:
            self.core.matcher.add_cached(pilot_id, list(completion.outputs))
        try:
            task = self.pilots.request(tx, pilot_id, call.cached)
        except TaskQueueNotFound:
            # The pilot is gone or cannot be matched (nothing written by the request): the
            # completion stands as ``complete`` alone would; its plain request says why.
            task = None
        return CompleteAndRequestAnswer(result, task)
