"""The site DHT at the Task Queue (Delgado Peris 2014 §III.A), and the run's counters.

Per site, one of the three architectures (``tq serve --architecture``, or the sites file's
``architecture:``).  With a DHT (centralized, distributed) the registration also answers a DHT id,
up to k live pilots of the site to join through and the site's key (generated at the site's first
registration and kept in ``site_state``; it travels only in this authenticated answer).  In the
distributed architecture it answers the site's master too: the first pilot to register gets the
role with epoch 1; later pilots learn who holds it (the master's calls are in ``master.py``).  The
site of the pilot that produced a file is recorded (a site's runnable tasks are those none of whose
inputs was produced at another site).

``SiteCoordination`` is given the pilot protocol, the completions and the submission, and extends
their ``register``, ``complete``, ``deregister`` and ``submit`` in the same transaction to add the
above and to feed the run's counters (``tq.service.counters``, after the commit)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import secrets
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from glidein_ext.tq.client import pilotkeys
from glidein_ext.tq.client.protocol import (
    Completion,
    CompletionAnswer,
    MasterInfo,
    RegisterAnswer,
    Registration,
)
from glidein_ext.tq.models import Architecture, TaskState
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.counters import RunCounters
from glidein_ext.tq.service.store.completions import Completions, Ended
from glidein_ext.tq.service.store.core import ACTIVE, StoreCore, Tx
from glidein_ext.tq.service.store.pilots import PilotProtocol
from glidein_ext.tq.service.store.workflows import WorkflowSubmission
from glidein_ext.tq.workflow import WorkflowDef

CONTACTS = 20  # site contacts handed to a joining pilot: Kademlia's k


class SiteCoordination:
    """The site DHT and the counters, over the pilot protocol, the completions and the
    submission; each method works in the caller's transaction."""

    def __init__(
        self,
        core: StoreCore,
        pilots: PilotProtocol,
        completions: Completions,
        workflows: WorkflowSubmission,
        *,
        architectures: Mapping[str, Architecture] | None = None,
        master_timeout: float = 60.0,
        counters: RunCounters | None = None,
    ) -> None:
        self.core = core
        self.pilots = pilots
        self.completions = completions
        self.workflows = workflows
        self.architectures = dict(architectures or {})
        self.master_timeout = master_timeout
        self.counters = counters or RunCounters(core.clock())

    def architecture_of(self, site: str) -> Architecture:
        """The site's architecture: the sites file's, else the service's default."""
        return self.architectures.get(site, self.core.default_architecture)

    # --- the pilot protocol, extended -------------------------------------------------------

    def register(self, tx: Tx, reg: Registration, credential_id: int | None) -> RegisterAnswer:
        answer = self.pilots.register(tx, reg, credential_id)
        architecture = self.architecture_of(reg.site)
        answer = dataclasses.replace(answer, architecture=architecture.value)
        if not architecture.uses_dht:
            return answer
        now = self.core.clock()
        pilot_id = answer.pilot_id
        conn = tx.conn
        state = site_row(conn, reg.site)
        dht_id = hashlib.sha1(  # noqa: S324 -- an identifier, not a secret (Delgado Peris 2014 §III.A)
            f"{reg.site}\0{pilot_id}\0{state.dht_key}".encode()
        ).hexdigest()
        conn.execute(
            t.pilots.update()
            .where(t.pilots.c.id == pilot_id)
            .values(dht_id=dht_id, dht_address=reg.dht_address, peer_url=reg.peer_url)
        )
        contacts = conn.execute(
            sa.select(t.pilots.c.dht_address)
            .where(
                t.pilots.c.site == reg.site,
                t.pilots.c.state.in_(ACTIVE),
                t.pilots.c.id != pilot_id,
                t.pilots.c.dht_address.is_not(None),
            )
            .order_by(t.pilots.c.id.desc())  # the newest: the likeliest to be alive
            .limit(CONTACTS)
        ).scalars()
        contacts_list = tuple(contacts)
        master = None
        own_key = None
        if architecture is Architecture.DISTRIBUTED:
            master = self._master_for_newcomer(tx, reg.site, state, pilot_id, now)
            own_key = pilot_key_of(state, reg.site, pilot_id).hex()
        return dataclasses.replace(
            answer,
            dht_id=dht_id,
            site_contacts=contacts_list,
            site_key=state.dht_key,
            master=master,
            master_timeout=round(self.master_timeout),
            pilot_key=own_key,
        )

    def _master_for_newcomer(
        self, tx: Tx, site: str, state: Any, pilot_id: int, now: float
    ) -> MasterInfo | None:
        """The site's master for a pilot that just registered (Delgado Peris 2014 §III.B): the first
        pilot of the site gets the role; later ones learn who has it (None: gone, an election is
        due)."""
        conn = tx.conn
        if state.master_id is not None:
            row = pilot_row(conn, state.master_id)
            if row is not None and row.state in ACTIVE:
                silent = state.master_seen is None or now - state.master_seen > self.master_timeout
                return None if silent else MasterInfo(row.id, row.dht_address or "", state.epoch)
        others = conn.execute(
            sa.select(sa.func.count()).where(
                t.pilots.c.site == site, t.pilots.c.state.in_(ACTIVE), t.pilots.c.id != pilot_id
            )
        ).scalar_one()
        if others:
            return None  # the live pilots elect the lowest id among them
        epoch = state.epoch + 1
        set_master(conn, site, pilot_id, epoch, now)
        tx.after_commit(functools.partial(self.counters.on_master, site, pilot_id, epoch, now))
        row = pilot_row(conn, pilot_id)
        return MasterInfo(pilot_id, row.dht_address or "", epoch)

    def complete(self, tx: Tx, pilot_id: int, completion: Completion) -> CompletionAnswer:
        return self.complete_ended(tx, pilot_id, completion)[0]

    def complete_ended(
        self, tx: Tx, pilot_id: int, completion: Completion, *, defer_pilot: bool = False
    ) -> tuple[CompletionAnswer, Ended | None]:
        """``complete``, and what an accepted report changed (``Completions.complete_ended``,
        ``defer_pilot`` included)."""
        answer, ended = self.completions.complete_ended(
            tx, pilot_id, completion, defer_pilot=defer_pilot
        )
        if ended is not None:
            self._after_completion(tx, pilot_id, completion, ended)
        return answer, ended

    def _after_completion(self, tx: Tx, pilot_id: int, completion: Completion, task: Ended) -> None:
        """What the pilot caches now, and the counters (the workflow may have ended).  The
        produced files' site is recorded with them (``completions``)."""
        now = self.core.clock()
        if task.state is TaskState.DONE and self.architecture_of(task.site) is not (
            Architecture.DISTRIBUTED
        ):
            # The pilot caches what it produced: the TQ's matcher prefers it for the tasks
            # that read it (pre-DHT, and centralized until the pilot's next request brings its
            # whole cache list).
            outputs = list(task.outputs)
            tx.after_commit(functools.partial(self.core.matcher.add_cached, pilot_id, outputs))

        def count() -> None:
            self.counters.on_completion(
                task.workflow_id,
                pilot_id,
                completion.started_at,
                completion.ended_at,
                completion.origins,
                outcome=_OUTCOMES.get(task.state, "retried"),
            )
            if task.finished:
                self.counters.on_finish(task.workflow_id, now)

        tx.after_commit(count)

    def deregister(self, tx: Tx, pilot_id: int) -> None:
        # The site's state row before the pilot's, as the master's calls lock them.
        site = pilot_row(tx.conn, pilot_id)
        if site is not None:
            tx.conn.execute(
                sa.select(t.site_state.c.site)
                .where(t.site_state.c.site == site.site)
                .with_for_update()
            ).all()
        self.pilots.deregister(tx, pilot_id)
        tx.conn.execute(
            t.site_state.update().where(t.site_state.c.master_id == pilot_id).values(master_id=None)
        )

    def submit(self, tx: Tx, workflow: WorkflowDef) -> int:
        workflow_id = self.workflows.submit(tx, workflow)
        now = self.core.clock()

        def count() -> None:
            self.counters.on_submit(workflow_id, workflow.name, len(workflow.tasks), now)
            if not workflow.tasks:
                self.counters.on_finish(workflow_id, now)

        tx.after_commit(count)
        return workflow_id


# A task's state after an accepted completion, as the run's counters count it.
_OUTCOMES = {TaskState.DONE: "done", TaskState.FAILED: "failed"}


def site_row(conn: Connection, site: str) -> Any:
    """The site's row, locked; made (with a new key and pilot secret) at the site's first
    registration."""
    query = sa.select(t.site_state).where(t.site_state.c.site == site).with_for_update()
    row = conn.execute(query).one_or_none()
    if row is None:
        # Two instances of a pool may see a new site at once: the second insert does nothing
        # and both then lock the one row.
        insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
        conn.execute(
            insert(t.site_state)
            .values(
                site=site,
                dht_key=secrets.token_hex(32),
                master_id=None,
                epoch=0,
                pilot_secret=secrets.token_hex(32),
            )
            .on_conflict_do_nothing(index_elements=["site"])
        )
        row = conn.execute(query).one()
    elif row.pilot_secret is None:  # a site from before per-pilot keys
        conn.execute(
            t.site_state.update()
            .where(t.site_state.c.site == site, t.site_state.c.pilot_secret.is_(None))
            .values(pilot_secret=secrets.token_hex(32))
        )
        row = conn.execute(query).one()
    return row


def pilot_key_of(state: Any, site: str, pilot_id: int) -> bytes:
    """Pilot ``pilot_id``'s own key (``tq.client.pilotkeys``), from the site's row."""
    return pilotkeys.pilot_key(bytes.fromhex(state.pilot_secret), site, pilot_id)


def epoch_key_hex(state: Any, site: str, pilot_id: int, epoch: int) -> str:
    """The key pilot ``pilot_id`` shares with the master of ``epoch``, for that master only."""
    return pilotkeys.epoch_key(pilot_key_of(state, site, pilot_id), epoch).hex()


def set_master(conn: Connection, site: str, pilot_id: int, epoch: int, now: float) -> None:
    conn.execute(
        t.site_state.update()
        .where(t.site_state.c.site == site)
        .values(master_id=pilot_id, epoch=epoch, master_seen=now)
    )


def pilot_row(conn: Connection, pilot_id: int | None) -> Any:
    if pilot_id is None:
        return None
    return conn.execute(sa.select(t.pilots).where(t.pilots.c.id == pilot_id)).one_or_none()
