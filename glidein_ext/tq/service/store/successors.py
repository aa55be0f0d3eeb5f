"""The successors ``assign`` names with each accepted pair (``Placed.successors``): the waiting
tasks a placed task's success alone makes runnable, which the site's master offers when the
completion comes without a ``sync`` (``sched.stock``; Delgado Peris 2014 §III.C's rounds, most
of which a chain's completions trigger).

A waiting task S is a successor of a placed task T when each input S still lacks is one of T's
outputs, T is its only unfinished predecessor, no input of S was made at another site than the
pilot's (``choose_offers`` decides where those go), and S may run on the pilot T went to
(``offers.mismatch``, both ways).  Any other waiting task that reads T's outputs or waits for T
makes ``more`` true: T's completion may release it, and only a ``sync`` shows that.

Read in the caller's transaction, for all of a call's pairs at once: a handful of statements
per call, whatever the number of pairs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from glidein_ext.tq.client.protocol import TaskOffer
from glidein_ext.tq.models import MatchSpec, TaskState
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.match_groups import pilot_ad, task_ad
from glidein_ext.tq.service.store.core import chunks, pilot_info, spec_of
from glidein_ext.tq.service.store.offers import mismatch, offer_of

# Successors named per task, at most (a master hands out one per finished task; the others are
# the Task Queue's to offer): past this, ``more``.
MAX_SUCCESSORS = 8
Found = tuple[tuple[TaskOffer, ...], bool]  # the successors, and whether T feeds more
NONE: Found = ((), False)

# The statements, built once (``statements``); each takes a list of ids or names.
_IDS: sa.BindParameter[list[int]] = sa.bindparam("ids", expanding=True)
_LFNS: sa.BindParameter[list[str]] = sa.bindparam("lfns", expanding=True)
_OUTPUTS = sa.select(t.task_outputs.c.task_id, t.task_outputs.c.lfn).where(
    t.task_outputs.c.task_id.in_(_IDS)
)
_READERS = sa.select(t.task_inputs.c.task_id, t.task_inputs.c.lfn).where(
    t.task_inputs.c.lfn.in_(_LFNS)
)
_AFTER = sa.select(t.task_after.c.task_id, t.task_after.c.after_id).where(
    t.task_after.c.after_id.in_(_IDS)
)
_WAITING = sa.select(t.tasks).where(
    t.tasks.c.id.in_(_IDS), t.tasks.c.state == TaskState.WAITING.value
)
# The inputs each waiting task lacks, and the sites its present inputs were made at.
_INPUTS = (
    sa.select(
        t.task_inputs.c.task_id, t.task_inputs.c.lfn, t.files.c.lfn.label("made"), t.files.c.site
    )
    .select_from(t.task_inputs.outerjoin(t.files, t.files.c.lfn == t.task_inputs.c.lfn))
    .where(t.task_inputs.c.task_id.in_(_IDS))
)
_BEFORE = t.tasks.alias("predecessor")
_UNFINISHED_BEFORE = (
    sa.select(t.task_after.c.task_id, t.task_after.c.after_id)
    .select_from(t.task_after.join(_BEFORE, _BEFORE.c.id == t.task_after.c.after_id))
    .where(t.task_after.c.task_id.in_(_IDS), _BEFORE.c.state != TaskState.DONE.value)
)


def successors(conn: Connection, placed: Mapping[int, Any], now: float) -> dict[int, Found]:
    """For each placed task (its id -> the row of the pilot it went to): its successors, best
    first as the offers order them (priority, then age), and whether it feeds more."""
    ids = sorted(placed)
    if not ids:
        return {}
    outputs: dict[int, set[str]] = defaultdict(set)
    maker: dict[str, int] = {}
    for row in _rows(conn, _OUTPUTS, "ids", ids):
        outputs[row.task_id].add(row.lfn)
        maker[row.lfn] = row.task_id
    feeds: dict[int, set[int]] = defaultdict(set)  # a placed task -> the tasks it may release
    for row in _rows(conn, _READERS, "lfns", sorted(maker)):
        feeds[maker[row.lfn]].add(row.task_id)
    for row in _rows(conn, _AFTER, "ids", ids):
        feeds[row.after_id].add(row.task_id)
    candidates = sorted(set().union(*feeds.values())) if feeds else []
    waiting = {row.id: row for row in _rows(conn, _WAITING, "ids", candidates)}
    lacking: dict[int, set[str]] = defaultdict(set)
    sites: dict[int, set[str]] = defaultdict(set)
    for row in _rows(conn, _INPUTS, "ids", sorted(waiting)):
        if row.made is None:
            lacking[row.task_id].add(row.lfn)
        elif row.site is not None:
            sites[row.task_id].add(row.site)
    before: dict[int, set[int]] = defaultdict(set)
    for row in _rows(conn, _UNFINISHED_BEFORE, "ids", sorted(waiting)):
        before[row.task_id].add(row.after_id)
    found: dict[int, Found] = {}
    specs: dict[str, tuple[MatchSpec, Any]] = {}
    for task_id in ids:
        readers = [waiting[c] for c in feeds.get(task_id, ()) if c in waiting]
        if not readers:
            found[task_id] = NONE
            continue
        pilot = placed[task_id]
        info = pilot_info(pilot)
        worker = pilot_ad(info)
        offers: list[TaskOffer] = []
        more = False
        for row in sorted(readers, key=lambda r: (-r.priority, r.id)):
            alone = lacking[row.id] <= outputs[task_id] and before[row.id] <= {task_id}
            here = sites[row.id] <= {pilot.site}
            fits = alone and here
            if fits:
                if row.spec not in specs:  # one spec, parsed and made an ad once per call
                    spec = spec_of(row)
                    specs[row.spec] = (spec, task_ad(spec))
                spec, ad = specs[row.spec]
                fits = mismatch(spec, info, now, ad, worker) is None
            if fits and len(offers) < MAX_SUCCESSORS:
                offers.append(offer_of(row, spec))
            else:
                more = True
        found[task_id] = (tuple(offers), more)
    return found


def _rows(conn: Connection, statement: Any, name: str, values: Sequence[Any]) -> Iterable[Any]:
    for chunk in chunks(values):
        yield from conn.execute(statement, {name: chunk})
