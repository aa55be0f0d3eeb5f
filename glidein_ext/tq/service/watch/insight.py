"""What operators see beyond ``status``: one task in full, tasks by state, why a queued task waits,
the sites' masters, the stuck-work snapshot and the gauges of ``/metrics``.

Read-only queries over the store's engine (each one short transaction of its own, never the
store's lock), kept apart from the store's request path.  Who may run a task is decided by the
matcher's own rules (``tq.service.matching.matcher``: Requirements both ways, resources, the pilot's
remaining life), on a throw-away Matcher built from the database's rows, so the answer is the
same whatever the sites' architecture (Delgado Peris 2014 §III: pre-DHT, centralized,
distributed) and whichever instance of a pool (Lee 2003) answers.

Why a queued task waits, in the order checked (like ``condor_q -better-analyze`` for an idle
job): no live pilot may run it; every pilot that may is busy; waitForData holds it for idle
pilots that cache its inputs (Hasham 2011 §IV-E, bounded); at a distributed site, an input was
produced at another site, so its master is not offered it (Delgado Peris 2014 §III.B); otherwise
idle pilots that may run it have not taken it yet (they ask at their own pace; the stuck-work
warnings say when that lasts).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from glidein_ext.errors import TaskQueueNotFound
from glidein_ext.tq.models import UNFINISHED, MatchSpec, PilotState, QueuedTask, TaskState
from glidein_ext.tq.service import tables as t
from glidein_ext.tq.service.matching import analysis
from glidein_ext.tq.service.matching.costly import CostlyEvaluator
from glidein_ext.tq.service.matching.matcher import Matcher
from glidein_ext.tq.service.store.core import pilot_info, queued_task, spec_of
from glidein_ext.tq.service.watch.stuck import BusyPilot, Snapshot, WorkflowProgress
from glidein_ext.tq.service.watch.stuck import QueuedTask as StuckTask

LIVE = (PilotState.IDLE.value, PilotState.BUSY.value)
REPORT_CHARS = 2000  # of a task's last report in an answer
LIST_LIMIT = 10_000
MAX_ANALYSED_SPECS = 50  # distinct MatchSpecs analysed for one `tq status --tasks` listing
# seconds of the costly expressions' worker one answer (``tq task ID``, a stuck-work pass) may use
COSTLY_BUDGET = 5.0


def _read(engine: Engine) -> Any:
    return engine.connect()


def _matching(
    tasks: Iterable[QueuedTask],
    pilots: Iterable[Any],
    now: float,
    costly: CostlyEvaluator | None,
) -> dict[int, list[int]]:
    """Task id -> the pilots (rows) that may run it, by the matcher's rules.  As in the service's
    own matcher, a pair with a costly expression (regexp and its kin, eval:
    ``tq.client.limits.costly_calls``) is never evaluated here: ``costly`` evaluates it in its
    worker process, within ``COSTLY_BUDGET`` seconds for all the pilots together; a pair left
    without a verdict (no evaluator, budget spent, the pilot struck) does not match."""
    matcher = Matcher(defer_costly=True)
    for task in tasks:
        matcher.add_task(task)
    found: dict[int, list[int]] = defaultdict(list)
    deadline = time.monotonic() + COSTLY_BUDGET
    for row in pilots:
        matcher.add_pilot(pilot_info(row))
        left = deadline - time.monotonic()
        if costly is not None and left > 0:
            costly.settle_now(row.id, now, matcher, min(left, costly.request_budget))
        for task_id in matcher.matching(row.id, now):
            found[task_id].append(row.id)
        matcher.remove_pilot(row.id)
    return found


def _live_pilots(conn: Connection) -> list[Any]:
    return list(
        conn.execute(sa.select(t.pilots).where(t.pilots.c.state.in_(LIVE)).order_by(t.pilots.c.id))
    )


def task_detail(
    engine: Engine,
    task_id: int,
    now: float,
    wait_for_data: float,
    architecture_of: Callable[[str], str],
    costly: CostlyEvaluator | None = None,
) -> dict[str, Any]:
    """One task: its fields, attempts, last report and exit code, pilot (site, host), times, and
    ``why`` (one line: why a waiting or queued task is not running); ``costly`` evaluates the
    pairs with costly expressions (``_matching``)."""
    with _read(engine) as conn:
        row = conn.execute(sa.select(t.tasks).where(t.tasks.c.id == task_id)).first()
        if row is None:
            raise TaskQueueNotFound(f"no task {task_id}")
        workflow = conn.execute(
            sa.select(t.workflows).where(t.workflows.c.id == row.workflow_id)
        ).one()
        attempts = [
            {
                "attempt": a.attempt,
                "pilot_id": a.pilot_id,
                "exit_code": a.exit_code,
                "ok": bool(a.ok),
                "at": a.at,
                **_where(conn, a.pilot_id),
            }
            for a in conn.execute(
                sa.select(t.completions)
                .where(t.completions.c.task_id == task_id)
                .order_by(t.completions.c.attempt)
            )
        ]
        why = None
        analysed = None
        if row.state == TaskState.WAITING.value:
            why = _why_waiting(conn, row)
        elif row.state == TaskState.QUEUED.value:
            why, analysed = _why_queued(conn, row, now, wait_for_data, architecture_of, costly)
        last_pilot = row.pilot_id if row.pilot_id is not None else None
        if last_pilot is None and attempts:
            last_pilot = attempts[-1]["pilot_id"]
        detail = {
            "id": row.id,
            "workflow_id": row.workflow_id,
            "workflow": workflow.name,
            "name": row.name,
            "step": row.step,
            "command": row.command,
            "state": row.state,
            "attempt": row.attempt,
            "failures": row.failures,
            "max_retries": row.max_retries,
            "priority": row.priority,
            "inputs": json.loads(row.inputs),
            "outputs": json.loads(row.outputs),
            "after": json.loads(row.after),
            "exit_code": row.exit_code,
            "report": None if row.report is None else row.report[-REPORT_CHARS:],
            "pilot_id": last_pilot,
            **_where(conn, last_pilot),
            "submitted_at": workflow.submitted_at,
            "runnable_since": row.runnable_since,
            "finished_at": row.finished_at,
            "attempts": attempts,
            "asks": _asks(spec_of(row)),
            "why": why,
            "analysis": None if analysed is None else analysed.to_json(),
        }
    return detail


def _asks(spec: MatchSpec) -> dict[str, Any]:
    """What the task asks of a pilot (its match ad, Hasham 2011 §IV-E): its MatchSpec but the
    ad's own attributes."""
    asks = dataclasses.asdict(spec)
    del asks["attributes"]
    return asks


def _analysis(spec: MatchSpec, live: Sequence[Any], now: float) -> analysis.Analysis:
    """The task's conditions over the first live pilots (``analysis.MAX_PILOTS``, by id)."""
    examined = [pilot_info(row) for row in live[: analysis.MAX_PILOTS]]
    return analysis.analyse(spec, examined, len(live), now)


def _where(conn: Connection, pilot_id: int | None) -> dict[str, Any]:
    if pilot_id is None:
        return {"site": None, "host": None}
    pilot = conn.execute(
        sa.select(t.pilots.c.site, t.pilots.c.host).where(t.pilots.c.id == pilot_id)
    ).first()
    return (
        {"site": None, "host": None} if pilot is None else {"site": pilot.site, "host": pilot.host}
    )


def _why_waiting(conn: Connection, row: Any) -> str:
    inputs = json.loads(row.inputs)
    present: set[str] = set()
    for start in range(0, len(inputs), 500):
        chunk = inputs[start : start + 500]
        present.update(conn.scalars(sa.select(t.files.c.lfn).where(t.files.c.lfn.in_(chunk))))
    missing = [lfn for lfn in inputs if lfn not in present]
    after = json.loads(row.after)
    pending = []
    if after:
        pending = [
            f"{r.id} ({r.name}, {r.state})"
            for r in conn.execute(
                sa.select(t.tasks.c.id, t.tasks.c.name, t.tasks.c.state).where(
                    t.tasks.c.id.in_(after), t.tasks.c.state != TaskState.DONE.value
                )
            )
        ]
    parts = []
    if missing:
        shown = ", ".join(missing[:3]) + (
            f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        )
        parts.append(f"waiting for data: {len(missing)} input(s) not produced yet ({shown})")
    if pending:
        shown = ", ".join(pending[:3]) + (
            f" and {len(pending) - 3} more" if len(pending) > 3 else ""
        )
        parts.append(f"waiting for task(s) {shown}")
    return "; ".join(parts) or "waiting: becomes queued at the next change"


def _why_queued(
    conn: Connection,
    row: Any,
    now: float,
    wait_for_data: float,
    architecture_of: Callable[[str], str],
    costly: CostlyEvaluator | None,
) -> tuple[str, analysis.Analysis | None]:
    """Why a queued task waits (one line), and its conditions over the live pilots."""
    live = _live_pilots(conn)
    task = queued_task(row)
    if not live:
        return "no matching pilot: no pilot is registered and alive", None
    analysed = _analysis(task.spec, live, now)
    why = _why_queued_line(
        conn, row, task, live, analysed, now, wait_for_data, architecture_of, costly
    )
    return why, analysed


def _why_queued_line(
    conn: Connection,
    row: Any,
    task: QueuedTask,
    live: list[Any],
    analysed: analysis.Analysis,
    now: float,
    wait_for_data: float,
    architecture_of: Callable[[str], str],
    costly: CostlyEvaluator | None,
) -> str:
    matches = set(_matching([task], live, now, costly).get(row.id, ()))
    fitting = [p for p in live if p.id in matches]
    if not fitting:
        sites = Counter(p.site for p in live)
        shown = ", ".join(f"{site}={n}" for site, n in sorted(sites.items()))
        return (
            f"no matching pilot: none of the {len(live)} live pilot(s) ({shown}) meets its "
            f"Requirements, resources or remaining life, or accepts it; {analysed.short()}"
        )
    idle = [p for p in fitting if p.state == PilotState.IDLE.value]
    if not idle:
        return (
            f"every pilot that may run it is busy ({len(fitting)}: {_ids(p.id for p in fitting)})"
        )
    inputs = set(task.inputs)
    holders = [p for p in idle if inputs & set(json.loads(p.cached))]
    until = (row.runnable_since or 0.0) + wait_for_data
    if holders and now < until:
        return (
            f"waiting for data: held for idle pilot(s) {_ids(p.id for p in holders)} caching its "
            f"inputs (waitForData), for {until - now:.0f} s more"
        )
    distributed = [p for p in idle if architecture_of(p.site) == "distributed"]
    if distributed and len(distributed) == len(idle):
        foreign = _foreign_sites(conn, task.inputs, {p.site for p in distributed})
        if foreign:
            return (
                f"not offered: input(s) produced at {', '.join(sorted(foreign))}, not at this site"
            )
        return (
            f"offered to the master of {', '.join(sorted({p.site for p in distributed}))}; "
            f"not assigned yet (idle pilot(s) {_ids(p.id for p in distributed)})"
        )
    return (
        f"not taken yet: idle pilot(s) {_ids(p.id for p in idle)} may run it and have not asked "
        "since (see the warnings of `tq status`)"
    )


def _foreign_sites(conn: Connection, inputs: Sequence[str], sites: set[str]) -> set[str]:
    if not inputs:
        return set()
    found = conn.scalars(
        sa.select(t.files.c.site).where(
            t.files.c.lfn.in_(list(inputs)[:500]), t.files.c.site.isnot(None)
        )
    )
    return {site for site in found if site not in sites}


def _ids(ids: Iterable[object], limit: int = 5) -> str:
    items = list(ids)
    shown = ", ".join(str(i) for i in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


# A listed task, in the listing's order: its columns, but ``pilot_id`` (the pilot holding it now,
# else its last attempt's) and that pilot's ``site`` and ``host``.
_LISTED = (
    "id",
    "workflow_id",
    "name",
    "state",
    "attempt",
    "failures",
    "exit_code",
    "report",
    "pilot_id",
    "site",
    "host",
    "finished_at",
)


def list_tasks(
    engine: Engine,
    workflow_id: int | None,
    state: str | None,
    limit: int,
    now: float | None = None,
) -> list[dict[str, Any]]:
    """Tasks in id order, with their last report's last line and their pilot (holding it now,
    else the last attempt's) with its site and host; a queued task's ``why`` (with ``now``):
    the condition that rejects the most live pilots (``analysis``), for at most
    ``MAX_ANALYSED_SPECS`` distinct MatchSpecs."""
    pilot_id = sa.func.coalesce(t.tasks.c.pilot_id, t.completions.c.pilot_id)
    joined = {
        "pilot_id": pilot_id.label("pilot_id"),
        "site": t.pilots.c.site,
        "host": t.pilots.c.host,
    }
    listed = (joined[name] if name in joined else t.tasks.c[name] for name in _LISTED)
    query = (
        sa.select(*listed, t.tasks.c.spec)
        .select_from(
            t.tasks.outerjoin(
                t.completions,
                sa.and_(
                    t.completions.c.task_id == t.tasks.c.id,
                    t.completions.c.attempt == t.tasks.c.attempt,
                ),
            ).outerjoin(t.pilots, t.pilots.c.id == pilot_id)
        )
        .order_by(t.tasks.c.id)
        .limit(min(limit, LIST_LIMIT))
    )
    if workflow_id is not None:
        query = query.where(t.tasks.c.workflow_id == workflow_id)
    if state is not None:
        query = query.where(t.tasks.c.state == state)
    with _read(engine) as conn:
        rows = conn.execute(query).all()
        queued = [r for r in rows if r.state == TaskState.QUEUED.value]
        live = _live_pilots(conn) if queued and now is not None else []
    whys: dict[str, str] = {}
    if now is not None:
        for r in queued:
            if r.spec not in whys and len(whys) < MAX_ANALYSED_SPECS:
                whys[r.spec] = (
                    _analysis(spec_of(r), live, now).short()
                    if live
                    else "no pilot is registered and alive"
                )
    return [
        {
            **{name: getattr(r, name) for name in _LISTED},
            "report": _first_line(r.report),
            "why": whys.get(r.spec) if r.state == TaskState.QUEUED.value else None,
        }
        for r in rows
    ]


def _first_line(text: str | None, limit: int = 200) -> str | None:
    if text is None:
        return None
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""


def masters(engine: Engine) -> list[dict[str, Any]]:
    """Each site with a DHT: its master (None: none now), epoch, the master's last call."""
    with _read(engine) as conn:
        rows = conn.execute(sa.select(t.site_state).order_by(t.site_state.c.site)).all()
    return [
        {"site": r.site, "master_id": r.master_id, "epoch": r.epoch, "master_seen": r.master_seen}
        for r in rows
    ]


def stuck_snapshot(engine: Engine, now: float, costly: CostlyEvaluator | None = None) -> Snapshot:
    """What ``tq.service.watch.stuck`` looks at: queued tasks with the idle pilots that may run
    them (``costly`` evaluates the pairs with costly expressions, ``_matching``), busy pilots with
    their last sign of life, unfinished workflows' progress."""
    with _read(engine) as conn:
        idle = list(
            conn.execute(sa.select(t.pilots).where(t.pilots.c.state == PilotState.IDLE.value))
        )
        queued_rows = list(
            conn.execute(
                sa.select(
                    t.tasks.c.id,
                    t.tasks.c.workflow_id,
                    t.tasks.c.spec,
                    t.tasks.c.inputs,
                    t.tasks.c.priority,
                    t.tasks.c.runnable_since,
                ).where(t.tasks.c.state == TaskState.QUEUED.value)
            )
        )
        busy = [
            BusyPilot(r.id, r.site, r.task_id, r.last_seen)
            for r in conn.execute(
                sa.select(
                    t.pilots.c.id, t.pilots.c.site, t.pilots.c.task_id, t.pilots.c.last_seen
                ).where(t.pilots.c.state == PilotState.BUSY.value)
            )
        ]
        per_wf: dict[int, Counter[str]] = defaultdict(Counter)
        for wf_id, state, n in conn.execute(
            sa.select(t.tasks.c.workflow_id, t.tasks.c.state, sa.func.count())
            .where(t.tasks.c.state.in_(UNFINISHED))
            .group_by(t.tasks.c.workflow_id, t.tasks.c.state)
        ):
            per_wf[wf_id][state] = n
        workflows = []
        stalled = {
            wf
            for wf, counts in per_wf.items()
            if counts[TaskState.RUNNING.value] == 0 and counts[TaskState.QUEUED.value] > 0
        }
        live = (
            list(conn.execute(sa.select(t.pilots).where(t.pilots.c.state.in_(LIVE))))
            if stalled
            else []
        )
        if per_wf:
            ended = dict(
                conn.execute(
                    sa.select(t.tasks.c.workflow_id, sa.func.max(t.tasks.c.finished_at))
                    .where(t.tasks.c.workflow_id.in_(list(per_wf)))
                    .group_by(t.tasks.c.workflow_id)
                ).all()
            )
            for wf in conn.execute(
                sa.select(t.workflows).where(t.workflows.c.id.in_(list(per_wf)))
            ):
                counts = per_wf[wf.id]
                last = max(wf.submitted_at, ended.get(wf.id) or 0.0)
                workflows.append(
                    WorkflowProgress(
                        wf.id,
                        wf.name,
                        sum(counts.values()),
                        counts[TaskState.RUNNING.value],
                        last,
                        counts[TaskState.QUEUED.value],
                    )
                )
    tasks = [queued_task(r) for r in queued_rows]
    if stalled:
        # a workflow with nothing running: are its queued tasks for no live pilot at all?
        theirs = [
            task for task, r in zip(tasks, queued_rows, strict=True) if r.workflow_id in stalled
        ]
        runnable = _matching(theirs, live, now, costly) if live else {}
        of = {r.id: r.workflow_id for r in queued_rows}
        unmatched: dict[int, list[int]] = defaultdict(list)
        for task in theirs:
            if not runnable.get(task.task_id):
                unmatched[of[task.task_id]].append(task.task_id)
        workflows = [
            dataclasses.replace(wf, unmatched=tuple(sorted(unmatched[wf.workflow_id])))
            for wf in workflows
        ]
    matches = _matching(tasks, idle, now, costly) if idle and tasks else {}
    queued = [
        StuckTask(r.id, r.workflow_id, tuple(sorted(matches.get(r.id, ())))) for r in queued_rows
    ]
    return Snapshot(now=now, queued=queued, busy=busy, workflows=workflows)


@dataclass(frozen=True)
class Gauges:
    """The state ``/metrics`` exports at each scrape (one short transaction)."""

    tasks: dict[tuple[str, str], int]  # (workflow "id:name", state) -> n
    pilots: dict[tuple[str, str], int]  # (site, state) -> n
    masters: list[dict[str, Any]]


def gauges(engine: Engine) -> Gauges:
    with _read(engine) as conn:
        names = dict(conn.execute(sa.select(t.workflows.c.id, t.workflows.c.name)).all())
        tasks: dict[tuple[str, str], int] = {}
        for wf_id, state, n in conn.execute(
            sa.select(t.tasks.c.workflow_id, t.tasks.c.state, sa.func.count()).group_by(
                t.tasks.c.workflow_id, t.tasks.c.state
            )
        ):
            tasks[(f"{wf_id}:{names.get(wf_id, '')}", state)] = n
        pilots: dict[tuple[str, str], int] = {}
        for site, state, n in conn.execute(
            sa.select(t.pilots.c.site, t.pilots.c.state, sa.func.count()).group_by(
                t.pilots.c.site, t.pilots.c.state
            )
        ):
            pilots[(site, state)] = n
        for site, n in conn.execute(
            sa.select(t.submissions.c.site, sa.func.count())
            .where(t.submissions.c.state == PilotState.INACTIVE.value)
            .group_by(t.submissions.c.site)
        ):
            pilots[(site, PilotState.INACTIVE.value)] = n
        rows = conn.execute(sa.select(t.site_state)).all()
    found = [
        {"site": r.site, "master_id": r.master_id, "epoch": r.epoch, "master_seen": r.master_seen}
        for r in rows
    ]
    return Gauges(tasks, pilots, found)


def completions_by_site(engine: Engine) -> dict[tuple[str, str], int]:
    """Accepted completions by the reporting pilot's site and result (``ok``, ``failed``)."""
    with _read(engine) as conn:
        rows = conn.execute(
            sa.select(t.pilots.c.site, t.completions.c.ok, sa.func.count())
            .select_from(t.completions.join(t.pilots, t.pilots.c.id == t.completions.c.pilot_id))
            .group_by(t.pilots.c.site, t.completions.c.ok)
        ).all()
    return {(site, "ok" if ok else "failed"): n for site, ok, n in rows}
