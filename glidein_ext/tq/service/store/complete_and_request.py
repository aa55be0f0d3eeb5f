"""A busy pilot's one call per task: its task's end and its request for the next, in one
transaction (Hasham 2011 §IV-E).

The pilot protocol's late binding is kept: the next task is matched when the pilot asks, which is
now the moment it reports the end of its last one, and the answer carries both.  The completion is
exactly ``complete`` (idempotent per (task, attempt), the site's bookkeeping included) and the
request exactly ``request`` (the pilot's cache list, the task it may already hold), run one after
the other in the caller's transaction, so a failure of either leaves neither done.

The matcher learns a transaction's changes only after its commit (``core``): tasks that this
completion queues (the waiting tasks it releases, or the task itself again after a failed
attempt) would not be offered to a request in the same transaction.  Such a completion is not
followed by the request: the answer carries no task and the pilot asks again at once with a plain
request (``agent``), which, after the commit, chooses among them too, as the two calls always
did: a task that reads what the pilot just produced goes to that pilot (Hasham 2011 §IV-E, the
cache-aware choice).  Otherwise the files the task produced are told to the matcher before the
choice (as a request's cache list is).  The pilot's row, read and locked by the completion, is
not read again, and is updated once: the completion's changes go with the request's.
"""

from __future__ import annotations

from types import SimpleNamespace

from glidein_ext.errors import TaskQueueNotFound
from glidein_ext.tq.client.protocol import (
    CompleteAndRequest,
    CompleteAndRequestAnswer,
    TaskAssignment,
)
from glidein_ext.tq.models import TaskState
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.store.core import ACTIVE, StoreCore, Tx
from glidein_ext.tq.service.store.pilots import PilotProtocol
from glidein_ext.tq.service.store.sites import SiteCoordination
from glidein_ext.tq.service.store.statements import update_row


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
        result, ended = self.sites.complete_ended(tx, pilot_id, completion, defer_pilot=True)
        if ended is None:  # not counted: the pilot's row is untouched, the request reads it
            return CompleteAndRequestAnswer(result, self._request(tx, pilot_id, call))
        if ended.queued or ended.pilot.state not in ACTIVE:  # the plain request (see the module)
            update_row(tx.conn, t.pilots, pilot_id, dict(ended.pilot_values))
            return CompleteAndRequestAnswer(result, None)
        if ended.state is TaskState.DONE and completion.outputs:
            self.core.matcher.add_cached(pilot_id, list(completion.outputs))
        # the row as the completion leaves it (idle, no task), written with the request's update
        row = SimpleNamespace(**{**ended.pilot._asdict(), **ended.pilot_values})
        try:
            task = self.pilots.request(
                tx, pilot_id, call.cached, row=row, pending=ended.pilot_values
            )
        except TaskQueueNotFound:  # raised before the request wrote anything
            update_row(tx.conn, t.pilots, pilot_id, dict(ended.pilot_values))
            task = None
        return CompleteAndRequestAnswer(result, task)

    def _request(self, tx: Tx, pilot_id: int, call: CompleteAndRequest) -> TaskAssignment | None:
        try:
            return self.pilots.request(tx, pilot_id, call.cached)
        except TaskQueueNotFound:
            # The pilot is gone or cannot be matched (nothing written by the request): the
            # completion stands as ``complete`` alone would; its plain request says why.
            return None
