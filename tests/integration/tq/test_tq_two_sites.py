"""Two distributed sites sharing one Task Queue and one SE, with real processes on 127.0.0.1
(Delgado Peris 2014 §III.B): each site's pilots elect a master, the Task Queue offers each site
what ``sched.offers`` says, and W3's merges whose two inputs were made at the two sites run (at
one of them, the other input read from the SE), as W1's and W2's tasks do; every task is done
once.  Before the offers core, a merge with an input made at each site was offered to neither
site and W3 never finished."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from glidein_ext.testbed.site_runs import SiteRun
from glidein_ext.tq.service import tables as t

SITES = ("T2_AA_Alpha", "T2_BB_Beta")


def _producers_at_both_sites(workflow: dict[str, Any]) -> None:
    """W3's producers by turns at each site (Requirements), so that each merge reads one input
    made at each: who runs what is otherwise the rounds' choice (neighbouring producers are
    one site's share, ``sched.offers``), and a merge across the sites a matter of timing."""
    producers = [task for task in workflow["tasks"] if task.get("step", 0) == 0]
    for n, task in enumerate(producers):
        task["requirements"] = f'TARGET.Site == "{SITES[n % 2]}"'


def test_two_distributed_sites_finish_w3_with_merges_across_sites_and_w1_w2(
    tmp_path: Path,
) -> None:
    with SiteRun(
        tmp_path / "run",
        "distributed",
        pilots=12,
        processes=2,  # one process per site: 6 pilots each
        sites=SITES,
        pilot_args=("--round-period", "1"),
        tq_args=("--master-timeout", "6"),
    ) as site:
        ids = {}
        for kind, scale in (("w3", 0.5), ("w1", 0.2), ("w2", 0.2)):
            shape = _producers_at_both_sites if kind == "w3" else None
            counters = site.run_workflow(kind, scale, sleep=0.2, timeout=90, shape=shape)
            ids[kind] = counters["id"]
            assert counters["tasks_done"] == counters["tasks"], (kind, counters)
        assert site.server is not None
        engine = sa.create_engine(f"sqlite:///{site.server.database}")
        try:
            with engine.connect() as conn:
                tasks = conn.execute(sa.select(t.tasks)).all()
                completions = conn.execute(sa.select(t.completions)).all()
                files = dict(conn.execute(sa.select(t.files.c.lfn, t.files.c.site)).all())
                merges = conn.execute(
                    sa.select(t.tasks.c.id, t.tasks.c.inputs).where(
                        t.tasks.c.workflow_id == ids["w3"], t.tasks.c.step == 1
                    )
                ).all()
        finally:
            engine.dispose()
    assert {row.state for row in tasks} == {"done"}
    assert {row.attempt for row in tasks} == {1}, "a task ran more than once"
    assert sorted(c.task_id for c in completions) == sorted(row.id for row in tasks)
    assert set(files.values()) == set(SITES)  # both sites worked
    across = [m.id for m in merges if len({files[lfn] for lfn in json.loads(m.inputs)}) == 2]
    print(f"\n{len(across)} of {len(merges)} W3 merges had an input made at each site")
    assert len(across) == len(merges) > 0, "a merge had its inputs made at one site"
    produced = list((site.se_dir / "store").rglob("*.dat"))
    assert len(produced) == len(tasks)  # every output staged out to the one SE
