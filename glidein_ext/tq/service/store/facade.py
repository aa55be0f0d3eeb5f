"""``Store``: the Task Queue's public state machine, one transaction per public method.

The store owns the shared state (``core.StoreCore``: engine, matcher, lock, clock) and composes
the parts, each a plain class given what it needs.  Every public method runs its parts' work in
one transaction (``StoreCore.write``: under the lock, the matcher and the counters updated only
after the commit; ``StoreCore.read`` for views, without the lock): the site DHT's additions to
``register``, ``complete``, ``deregister`` and ``submit`` (``sites``) run in the same transaction
as the pilot protocol's part, so a failure leaves nothing half done.  The exceptions are the
matcher-only ``queued_groups_for`` (no transaction) and ``absorb`` (one transaction, only when a
notification leaves something to re-read).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from sqlalchemy.engine import Engine

from glidein_ext.errors import TaskQueueError
from glidein_ext.tq.client import protocol as p
from glidein_ext.tq.client.credentials import CredentialInfo, IssuedCredential
from glidein_ext.tq.manager.monitor import SiteView
from glidein_ext.tq.models import Architecture, PilotInfo
from glidein_ext.tq.service.counters import RunCounters
from glidein_ext.tq.service.matching.matcher import Matcher
from glidein_ext.tq.service.store.bookkeeping import MonitorBookkeeping
from glidein_ext.tq.service.store.claim import MasterClaim
from glidein_ext.tq.service.store.complete_and_request import CompletionThenRequest
from glidein_ext.tq.service.store.completions import Completions
from glidein_ext.tq.service.store.core import CoreOptions, SkippedRow, StoreCore, Tx
from glidein_ext.tq.service.store.credentials import CredentialStore
from glidein_ext.tq.service.store.master import MasterCalls
from glidein_ext.tq.service.store.pilots import PilotProtocol
from glidein_ext.tq.service.store.pool import News, PoolView, Resync
from glidein_ext.tq.service.store.sites import SiteCoordination
from glidein_ext.tq.service.store.views import StatusViews, TaskRow
from glidein_ext.tq.service.store.workflows import WorkflowSubmission
from glidein_ext.tq.workflow import WorkflowDef

if TYPE_CHECKING:
    from typing import Unpack


class Store:
    """The TQ state machine over a database; every public method is one transaction."""

    def __init__(
        self,
        engine: Engine,
        *,
        architectures: Mapping[str, Architecture] | None = None,
        master_timeout: float = 60.0,
        counters: RunCounters | None = None,
        **options: Unpack[CoreOptions],
    ) -> None:
        """``options``: the shared state's (``StoreCore``: timings, default architecture, clock)."""
        core = StoreCore(engine, **options)
        self._core = core
        self._pilots = PilotProtocol(core)
        self._completions = Completions(core)
        self._workflows = WorkflowSubmission(core)
        self._sites = SiteCoordination(
            core,
            self._pilots,
            self._completions,
            self._workflows,
            architectures=architectures,
            master_timeout=master_timeout,
            counters=counters,
        )
        self._claim = MasterClaim(core, self._sites, self._pilots)
        self._master = MasterCalls(core, self._sites, self._pilots)
        self._credentials = CredentialStore(core, self._pilots)
        self._bookkeeping = MonitorBookkeeping(core)
        self._views = StatusViews(core)
        self._pool = PoolView(core)
        self._next = CompletionThenRequest(core, self._sites, self._pilots)

    # --- the shared state --------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        return self._core.engine

    def close(self) -> None:
        """Give back the connection the writes keep, and the engine's pooled ones."""
        self._core.close()
        self._core.engine.dispose()

    @property
    def matcher(self) -> Matcher:
        return self._core.matcher

    @property
    def skipped(self) -> dict[tuple[str, int], SkippedRow]:
        """Rows the matcher could not take (``/healthz``), by (table, id)."""
        return self._core.skipped

    @property
    def clock(self) -> Callable[[], float]:
        return self._core.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self._core.clock = clock

    @property
    def lock(self) -> threading.RLock:
        """The lock that serialises this process's transactions (``tq.service.api.unblocked``
        tries it, so that the event loop never waits for it)."""
        return self._core.lock

    @property
    def counters(self) -> RunCounters:
        return self._sites.counters

    def architecture_of(self, site: str) -> Architecture:
        """The site's architecture: the sites file's, else the service's default."""
        return self._sites.architecture_of(site)

    def load(self) -> None:
        """Rebuild the matcher from the database; live pilots get a fresh heartbeat grace."""
        self._core.write(lambda tx: self._core.load(tx.conn))

    # --- the pilot protocol (Hasham 2011 §IV), with the site DHT (Delgado Peris 2014) --------

    def register(self, reg: p.Registration, credential_id: int | None = None) -> p.RegisterAnswer:
        """A new pilot: its id, the heartbeat it owes, and the other pilots on its host (IV-D);
        at a site with a DHT also its DHT id, contacts, key and master.  ``credential_id``: the
        credential it registers with (None: the shared pilot token)."""
        return self._core.write(lambda tx: self._sites.register(tx, reg, credential_id))

    def request(
        self, pilot_id: int, cached: Sequence[str] | None = None
    ) -> p.TaskAssignment | None:
        """Hasham 2011 §IV-E: match the pilot to its best task and assign it; None when nothing
        fits."""
        return self._core.write(lambda tx: self._pilots.request(tx, pilot_id, cached))

    def heartbeat(self, pilot_id: int, cached: Sequence[str] | None = None) -> p.HeartbeatAnswer:
        """Hasham 2011 §IV-D: the pilot is alive; answer the other live pilots on its host."""
        return self._core.write(lambda tx: self._pilots.heartbeat(tx, pilot_id, cached))

    def complete(self, pilot_id: int, completion: p.Completion) -> p.CompletionAnswer:
        """A task's end; idempotent: a repeated or stale report is answered, never counted twice."""
        return self._core.write(lambda tx: self._sites.complete(tx, pilot_id, completion))

    def complete_and_request(
        self, pilot_id: int, call: p.CompleteAndRequest
    ) -> p.CompleteAndRequestAnswer:
        """``complete`` and then ``request`` in one transaction: a busy pilot's one call per
        task (``complete_and_request``)."""
        return self._core.write(lambda tx: self._next.complete_and_request(tx, pilot_id, call))

    def complete_and_request_each(
        self, calls: Sequence[tuple[int, p.CompleteAndRequest]]
    ) -> list[p.CompleteAndRequestAnswer | TaskQueueError]:
        """``complete_and_request`` for each (pilot, call), in order, under one hold of the
        lock: the answers each call alone would get one after the other.  One transaction for
        all, committed once (each call sees the ones before it, as the next transaction would:
        the tasks they took are passed by, ``Tx.taken``); should one call fail, it is rolled
        back whole and each call runs in its own transaction, a call's TaskQueueError in its
        place, never stopping the calls after it."""
        results: list[p.CompleteAndRequestAnswer | TaskQueueError] = []
        with self._core.lock:
            if len(calls) > 1:
                try:
                    return list(self._core.write(functools.partial(self._together, calls)))
                except TaskQueueError:
                    pass  # rolled back: each alone now, so that the failure is one call's
            for pilot_id, call in calls:
                try:
                    results.append(self.complete_and_request(pilot_id, call))
                except TaskQueueError as exc:
                    results.append(exc)
        return results

    def _together(
        self, calls: Sequence[tuple[int, p.CompleteAndRequest]], tx: Tx
    ) -> list[p.CompleteAndRequestAnswer]:
        return [self._next.complete_and_request(tx, pilot_id, call) for pilot_id, call in calls]

    def deregister(self, pilot_id: int) -> None:
        """The pilot leaves (on exit or SIGTERM); a task it still held goes back to the queue."""
        self._core.write(lambda tx: self._sites.deregister(tx, pilot_id))

    def reap(self) -> list[int]:
        """Pilots whose heartbeat lapsed or whose life ended: lost, their tasks requeued."""
        return self._core.write(self._pilots.reap)

    def submit(self, workflow: WorkflowDef) -> int:
        """Store a whole workflow, or nothing (WorkflowError); its id."""
        return self._core.write(lambda tx: self._sites.submit(tx, workflow))

    # --- a distributed site's master (Delgado Peris 2014 §III.B) -----------------------------

    def claim_master(self, site: str, claim: p.Claim) -> p.ClaimAnswer:
        """A pilot asks for its site's master role; granted by ``sched.election.arbitrate``."""
        return self._core.write(lambda tx: self._claim.claim_master(tx, site, claim))

    def sync(self, site: str, call: p.SiteSync) -> p.SiteSyncAnswer:
        """The master's bulk call: completions, dead workers, undelivered tasks, runnable tasks."""
        return self._core.write(lambda tx: self._master.sync(tx, site, call))

    def assign(self, site: str, call: p.SiteAssign) -> p.SiteAssignAnswer:
        """The round's pairs; each task taken atomically, each pilot given one task at most."""
        return self._core.write(lambda tx: self._master.assign(tx, site, call))

    def seen(self, site: str, pilot_id: int, epoch: int) -> None:
        """The site's master (of this epoch) is there: the end of its long poll, which counts
        as its call (it vouches for its pilots too); StaleMasterError if it is no more."""
        self._core.write(lambda tx: self._master.vouch(tx, site, pilot_id, epoch))

    def offers(self, site: str, want: int) -> tuple[tuple[p.TaskOffer, ...], int]:
        """The site's runnable tasks (at most ``want``) and how many it has: a long poll's
        second look (``tq.service.site_waits``)."""
        found, queued = self._core.read(lambda conn: self._master.offers.runnable(conn, site, want))
        return tuple(found), queued

    # --- per-pilot credentials --------------------------------------------------------------

    def mint_credentials(
        self, site: str, count: int = 1, *, ttl: float | None = None, note: str = ""
    ) -> list[IssuedCredential]:
        """``count`` new credentials of ``site``, expiring ``ttl`` seconds from now (None:
        never); their secrets are in the answer and nowhere else."""
        return self._core.write(
            lambda tx: self._credentials.mint_credentials(tx, site, count, ttl, note)
        )

    def credential_by_hash(self, digest: str) -> CredentialInfo | None:
        """The credential whose secret hashes to ``digest``, or None."""
        return self._core.read(lambda conn: self._credentials.credential_by_hash(conn, digest))

    def credentials(self) -> list[CredentialInfo]:
        """Every credential (no secret), with the number of pilots registered with each."""
        return self._core.read(self._credentials.credentials)

    def bind_credentials(self, pairs: Sequence[tuple[int, str]]) -> None:
        """Bind credentials to the batch jobs carrying them (credential id, batch id)."""
        self._core.write(lambda tx: self._credentials.bind_credentials(tx, pairs))

    def revoke_credential(self, credential_id: int) -> list[int]:
        """Revoke a credential; its live pilots are lost, their tasks requeued; the pilots."""
        return self._core.write(lambda tx: self._credentials.revoke_credential(tx, credential_id))

    def pilot_owner(self, pilot_id: int) -> int | None:
        """The credential the pilot registered with (None: the shared token)."""
        return self._core.read(lambda conn: self._credentials.pilot_owner(conn, pilot_id))

    # --- the PilotMonitor's bookkeeping (Hasham 2011 §IV-A) ---------------------------------

    def record_submission(self, batch_id: str, site: str) -> None:
        self._core.write(lambda tx: self._bookkeeping.record_submission(tx, batch_id, site))

    def submissions(self, site: str) -> dict[str, str]:
        """Batch id -> inactive, registered or vanished, for every pilot submitted to ``site``."""
        return self._core.read(lambda conn: self._bookkeeping.submissions(conn, site))

    def mark_vanished(self, batch_ids: Iterable[str]) -> None:
        """Submitted pilots that left the batch queue without registering; their credentials
        are revoked."""
        self._core.write(lambda tx: self._bookkeeping.mark_vanished(tx, batch_ids))

    def site_view(self, site: str) -> SiteView:
        """The site's pilots inactive, idle and busy."""
        return self._core.read(lambda conn: self._bookkeeping.site_view(conn, site))

    def queued_groups_for(self, template: PilotInfo, now: float) -> list[int]:
        """Queued tasks per match group that a pilot like ``template`` could run (the matcher
        only: no transaction)."""
        with self._core.lock:
            return self._bookkeeping.queued_groups_for(template, now)

    # --- the operators' views ---------------------------------------------------------------

    def status(self) -> p.Status:
        """Workflows with their tasks by state; pilots by site and state."""
        return self._core.read(self._views.status)

    def task_rows(self) -> list[TaskRow]:
        """Every task, in id order."""
        return self._core.read(self._views.task_rows)

    # --- a pool of instances on one database (Lee 2003) -------------------------------------

    def absorb(self, news: News) -> None:
        """Make the matcher agree with what other instances changed (``tq.service.pool.notify``);
        one transaction if something must be re-read, none otherwise."""
        if not news.tasks and not news.pilots:
            return
        with self._core.lock:
            tasks, pilots = self._pool.absorb(news)
            if tasks or pilots:
                self._reread(tasks, pilots)

    def _reread(self, tasks: Sequence[int], pilots: Sequence[int]) -> None:
        self._core.write(lambda tx: self._pool.reread(tx.conn, tasks, pilots))

    def resync(self) -> Resync:
        """The whole queue and every live pilot, re-read (the safety net of notification)."""
        return self._core.write(lambda tx: self._pool.resync(tx.conn))
