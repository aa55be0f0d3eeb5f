"""The successors ``assign`` names with each accepted pair (``Placed.successors``): the waiting
tasks a placed task's success alone makes runnable, which the site's master offers when the
completion comes without a ``sync`` (``sched.stock``; Delgado Peris 2014 §III.C's rounds, most
of which a chain's completions trigger).

A waiting task S is a successor of a placed task T when each input S still lacks is an output
of T or of another task, no input of S was made at another site than the pilot's
(``choose_offers`` decides where those go), and S may run on the pilot T went to
(``offers.mismatch``, both ways).  ``needs`` names, for each successor, the unfinished tasks
other than T it waits for (the makers of its other lacking inputs, its other predecessors): a
merge is a joint successor of the tasks that make its inputs, which the master releases when
it saw all of them succeed (``sched.stock``).  Any other waiting task that reads T's outputs or
waits for T makes ``more`` true: T's completion may release it, and only a ``sync`` shows that.

Read in the caller's transaction, for all of a call's pairs at once: a handful of statements
per call, whatever the number of pairs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from glidein_ext.tq.client.protocol import TaskOffer
from glidein_ext.tq.models import MatchSpec, TaskState
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.matching.match_groups import pilot_ad, task_ad
from glidein_ext.tq.service.matching.matcher import Matcher
from glidein_ext.tq.service.store.core import chunks, pilot_info, spec_of
from glidein_ext.tq.service.store.offers import mismatch, offer_of

# Successors named per task, at most (a master hands out one per finished task; the others are
# the Task Queue's to offer): past this, ``more``.
MAX_SUCCESSORS = 8
MAX_NEEDS = 8  # other tasks a successor may wait for; a wider merge is ``more``
# the successors, whether T feeds more, and each successor's other tasks (empty: all alone)
Found = tuple[tuple[TaskOffer, ...], bool, tuple[tuple[int, ...], ...]]
NONE: Found = ((), False, ())

# The statements, built once (``statements``); each takes a list of ids or names.
_IDS: sa.BindParameter[list[int]] = sa.bindparam("ids", expanding=True)
_LFNS: sa.BindParameter[list[str]] = sa.bindparam("lfns", expanding=True)
_OUTPUTS = sa.select(t.task_outputs.c.task_id, t.task_outputs.c.lfn).where(
    t.task_outputs.c.task_id.in_(_IDS)
)
_READERS = sa.select(t.task_inputs.c.task_id, t.task_inputs.c.lfn).where(
    t.task_inputs.c.lfn.in_(_LFNS)
)
_MAKERS = sa.select(t.task_outputs.c.task_id, t.task_outputs.c.lfn).where(
    t.task_outputs.c.lfn.in_(_LFNS)
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


@dataclass
class _Graph:
    """What the call's statements read: who makes and reads what, and the waiting readers."""

    maker: dict[str, int] = field(default_factory=dict)  # an lfn -> the task that makes it
    feeds: dict[int, set[int]] = field(default_factory=lambda: defaultdict(set))
    waiting: dict[int, Any] = field(default_factory=dict)  # a waiting reader's row
    lacking: dict[int, set[str]] = field(default_factory=lambda: defaultdict(set))
    sites: dict[int, set[str]] = field(default_factory=lambda: defaultdict(set))
    before: dict[int, set[int]] = field(default_factory=lambda: defaultdict(set))


def _read(conn: Connection, ids: list[int]) -> _Graph:
    graph = _Graph()
    for row in _rows(conn, _OUTPUTS, "ids", ids):
        graph.maker[row.lfn] = row.task_id
    for row in _rows(conn, _READERS, "lfns", sorted(graph.maker)):
        graph.feeds[graph.maker[row.lfn]].add(row.task_id)  # the tasks it may release
    for row in _rows(conn, _AFTER, "ids", ids):
        graph.feeds[row.after_id].add(row.task_id)
    candidates = sorted(set().union(*graph.feeds.values())) if graph.feeds else []
    graph.waiting = {row.id: row for row in _rows(conn, _WAITING, "ids", candidates)}
    for row in _rows(conn, _INPUTS, "ids", sorted(graph.waiting)):
        if row.made is None:
            graph.lacking[row.task_id].add(row.lfn)
        elif row.site is not None:
            graph.sites[row.task_id].add(row.site)
    for row in _rows(conn, _UNFINISHED_BEFORE, "ids", sorted(graph.waiting)):
        graph.before[row.task_id].add(row.after_id)
    lacks = set().union(*graph.lacking.values()) if graph.lacking else set()
    for row in _rows(conn, _MAKERS, "lfns", sorted(lacks - graph.maker.keys())):
        graph.maker[row.lfn] = row.task_id  # a merge's other inputs' makers
    return graph


def successors(
    conn: Connection, placed: Mapping[int, Any], now: float, matcher: Matcher | None = None
) -> dict[int, Found]:
    """For each placed task (its id -> the row of the pilot it went to): its successors, best
    first as the offers order them (priority, then age), whether it feeds more, and what else
    each successor needs.  A costly pair (``offers.mismatch`` with ``matcher``) is never
    evaluated here: a waiting task has no verdict yet, so it is not named, and ``more`` is
    true."""
    ids = sorted(placed)
    if not ids:
        return {}
    graph = _read(conn, ids)
    found: dict[int, Found] = {}
    specs: dict[str, tuple[MatchSpec, Any]] = {}
    for task_id in ids:
        readers = [graph.waiting[c] for c in graph.feeds.get(task_id, ()) if c in graph.waiting]
        if not readers:
            found[task_id] = NONE
            continue
        pilot = placed[task_id]
        info = pilot_info(pilot)
        worker = pilot_ad(info)
        offers: list[TaskOffer] = []
        needs: list[tuple[int, ...]] = []
        more = False
        for row in sorted(readers, key=lambda r: (-r.priority, r.id)):
            lacks = graph.lacking[row.id]
            makers = {graph.maker[lfn] for lfn in lacks if lfn in graph.maker}
            rest = tuple(sorted((makers | graph.before[row.id]) - {task_id}))
            here = graph.sites[row.id] <= {pilot.site}
            # Every lacking input has a maker (a task's output), and not too many others.
            fits = all(lfn in graph.maker for lfn in lacks) and here and len(rest) <= MAX_NEEDS
            if fits:
                if row.spec not in specs:  # one spec, parsed and made an ad once per call
                    spec = spec_of(row)
                    specs[row.spec] = (spec, task_ad(spec))
                spec, ad = specs[row.spec]
                fits = mismatch(spec, info, now, ad, worker, matcher) is None
            if fits and len(offers) < MAX_SUCCESSORS:
                offers.append(offer_of(row, spec))
                needs.append(rest)
            else:
                more = True
        found[task_id] = (tuple(offers), more, tuple(needs) if any(needs) else ())
    return found


def _rows(conn: Connection, statement: Any, name: str, values: Sequence[Any]) -> Iterable[Any]:
    for chunk in chunks(values):
        yield from conn.execute(statement, {name: chunk})
