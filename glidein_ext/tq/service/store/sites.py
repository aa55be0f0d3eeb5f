"""The site DHT at the Task Queue (Delgado Peris 2014 §III.A), and the run's counters.

Per site, one of the three architectures (``tq serve --architecture``, or the sites file's
``architecture:``).  With a DHT (centralized, distributed) the registration also answers a DHT id,
up to k live pilots of the site to join through and the site's key (generated at the site's first
registration and kept in ``site_state``; it travels only in this authenticated answer).  In the
distributed architecture it answers the site's master too: the first pilot to register gets the
role with epoch 1; later pilots learn who holds it (the master's calls are in ``master.py``).  The
site of the pilot that produced a file is recorded (a site's runnable tasks are those none of whose
inputs was produced at another site).

``SiteCoordination`` wraps the pilot protocol's ``register``, ``complete``, ``deregister`` and
``submit`` (cooperative inheritance: ``Store`` lists it, through ``MasterCalls``, first) to add
the above and to feed the run's counters (``tq.service.counters``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

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
from glidein_ext.tq.service.store.completions import Completions
from glidein_ext.tq.service.store.core import ACTIVE
from glidein_ext.tq.service.store.pilots import PilotProtocol
from glidein_ext.tq.service.store.workflows import WorkflowSubmission
from glidein_ext.tq.workflow import WorkflowDef

CONTACTS = 20  # site contacts handed to a joining pilot: Kademlia's k
UNFINISHED = (TaskState.WAITING.value, TaskState.QUEUED.value, TaskState.RUNNING.value)


class SiteCoordination(PilotProtocol, Completions, WorkflowSubmission):
    """The site DHT, the master's protocol and the counters, over the store's parts."""

    def __init__(
        self,
        *args: Any,
        architectures: Mapping[str, Architecture] | None = None,
        master_timeout: float = 10.0,
        counters: RunCounters | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.architectures = dict(architectures or {})
        self.master_timeout = master_timeout
        self.counters = counters or RunCounters(self.clock())

    def architecture_of(self, site: str) -> Architecture:
        """The site's architecture: the sites file's, else the service's default."""
        return self.architectures.get(site, Architecture(self.cache_mode))

    # --- the pilot protocol, extended -------------------------------------------------------

    def register(self, reg: Registration, credential_id: int | None = None) -> RegisterAnswer:
        answer = super().register(reg, credential_id)
        architecture = self.architecture_of(reg.site)
        answer = dataclasses.replace(
            answer, architecture=architecture.value, cache_mode=architecture.value
        )
        if not architecture.uses_dht:
            return answer
        now = self.clock()
        pilot_id = answer.pilot_id
        with self._lock, self._tx() as conn:
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
            if architecture is Architecture.DISTRIBUTED:
                master = self._master_for_newcomer(conn, reg.site, state, pilot_id, now)
        return dataclasses.replace(
            answer,
            dht_id=dht_id,
            site_contacts=contacts_list,
            site_key=state.dht_key,
            master=master,
            master_timeout=round(self.master_timeout),
        )

    def _master_for_newcomer(
        self, conn: Connection, site: str, state: Any, pilot_id: int, now: float
    ) -> MasterInfo | None:
        """The site's master for a pilot that just registered (Delgado Peris 2014 §III.B): the first
        pilot of the site gets the role; later ones learn who has it (None: gone, an election is
        due)."""
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
        self.counters.on_master(site, pilot_id, epoch, now)
        row = pilot_row(conn, pilot_id)
        return MasterInfo(pilot_id, row.dht_address or "", epoch)

    def complete(self, pilot_id: int, completion: Completion) -> CompletionAnswer:
        answer = super().complete(pilot_id, completion)
        if answer.accepted:
            self._after_completion(pilot_id, completion)
        return answer

    def _after_completion(self, pilot_id: int, completion: Completion) -> None:
        """The produced files' site, what the pilot caches now, and the counters (the workflow
        may have ended)."""
        now = self.clock()
        with self._lock, self._tx() as conn:
            task = conn.execute(
                sa.select(t.tasks.c.workflow_id, t.tasks.c.state, t.tasks.c.outputs).where(
                    t.tasks.c.id == completion.task_id
                )
            ).one()
            site = conn.execute(
                sa.select(t.pilots.c.site).where(t.pilots.c.id == pilot_id)
            ).scalar_one()
            if task.state == TaskState.DONE.value:
                conn.execute(
                    t.files.update()
                    .where(t.files.c.produced_by == completion.task_id)
                    .values(site=site)
                )
                if self.architecture_of(site) is not Architecture.DISTRIBUTED:
                    # The pilot caches what it produced: the TQ's matcher prefers it for the
                    # tasks that read it (pre-DHT, and centralized until the pilot's next
                    # request brings its whole cache list).
                    self.matcher.add_cached(pilot_id, json.loads(task.outputs))
            # one unfinished task is enough to know (an index lookup, not a count of them all)
            remaining = conn.execute(
                sa.select(t.tasks.c.id)
                .where(t.tasks.c.workflow_id == task.workflow_id, t.tasks.c.state.in_(UNFINISHED))
                .limit(1)
            ).first()
        self.counters.on_completion(
            task.workflow_id,
            pilot_id,
            completion.started_at,
            completion.ended_at,
            completion.origins,
        )
        if remaining is None:
            self.counters.on_finish(task.workflow_id, now)

    def deregister(self, pilot_id: int) -> None:
        super().deregister(pilot_id)
        with self._lock, self._tx() as conn:
            conn.execute(
                t.site_state.update()
                .where(t.site_state.c.master_id == pilot_id)
                .values(master_id=None)
            )

    def submit(self, workflow: WorkflowDef) -> int:
        workflow_id = super().submit(workflow)
        self.counters.on_submit(workflow_id, workflow.name, len(workflow.tasks), self.clock())
        if not workflow.tasks:
            self.counters.on_finish(workflow_id, self.clock())
        return workflow_id


def site_row(conn: Connection, site: str) -> Any:
    """The site's row, locked; made (with a new key) at the site's first registration."""
    query = sa.select(t.site_state).where(t.site_state.c.site == site).with_for_update()
    row = conn.execute(query).one_or_none()
    if row is None:
        # Two instances of a pool may see a new site at once: the second insert does nothing
        # and both then lock the one row.
        insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
        conn.execute(
            insert(t.site_state)
            .values(site=site, dht_key=secrets.token_hex(32), master_id=None, epoch=0)
            .on_conflict_do_nothing(index_elements=["site"])
        )
        row = conn.execute(query).one()
    return row


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
