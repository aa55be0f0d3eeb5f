"""Glideins pull Task Queue work through their own startd (Hasham 2011 §IV in HTCondor).

The PilotManager (what `tq serve --sites` runs) submits real glideins -- `glidein-ext wrapper
--tq` site jobs, each with its own credential file -- to the site pool's schedd; their startds join
the VO pool; each glidein's agent registers its lanes with the Task Queue and its startd fetches
their tasks through the FETCH_WORK hook, runs them as jobs of its partitionable slot, and reports
them (REPLY_FETCH, the starter's JOB_EXIT).  Then the site drains one (`site vacate`: the running
task finishes, nothing new is fetched, the agent leaves, the site job ends 0), and gives another a
deadline its task cannot meet (HTCondor vacates the task in time, the Task Queue requeues it and
another glidein runs it).  The tests share the pools, the Task Queue and the glideins, and each
also runs alone (it submits the glideins it needs when none runs).  Each test runs twice, on a
distributed site (its lanes join the site DHT, a master pilot's rounds assign the tasks: Delgado
Peris 2014 §III.B; a drained glidein's lanes report their last tasks before they leave, a lane
that is the master in a last sync) and on a centralized one (the Task Queue assigns).  Each
architecture has its own stack, shared by its three tests and torn down (its glideins gone from
the VO pool) before the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from glidein_ext.condor import JobStatus
from glidein_ext.dht.contact import parse_address
from glidein_ext.dht.node import DhtNode
from glidein_ext.errors import CondorError, DhtError
from glidein_ext.sandbox.pool import (
    GLIDEIN_BASE_CONFIG,
    HOST_CLIENT_ENV,
    SITE_POOL,
    VO_POOL,
    CondorSandbox,
    wait_for,
)
from glidein_ext.sandbox.site import (
    CHROOT_BIN,
    GLIDEIN_ATTR,
    SiteGlidein,
    SiteNode,
    VoJob,
    glidein_sandbox,
    site_job,
    start_site_nodes,
    stop_site_nodes,
    submit_vo_jobs,
    wait_glideins_joined,
)
from glidein_ext.testbed.tq_server import TqServer
from glidein_ext.tq.manager.monitor import SitePolicy, Thresholds, monitor_cycle
from glidein_ext.tq.manager.pilot_submit import PilotJob, PilotManager
from glidein_ext.tq.service.db import make_engine
from glidein_ext.tq.service.store import Store
from glidein_ext.tq.workflow import generate

pytestmark = pytest.mark.condor

SITE = "T2_GLIDEINS"
CPUS = 2  # per glidein: two lanes, two tasks at once in its partitionable slot
TASK_ATTR = "GlideinExtTqTask"
T = TypeVar("T")


@dataclass
class Stack:
    box: CondorSandbox  # the site pool
    vo: CondorSandbox  # the VO pool
    nodes: list[SiteNode]
    server: TqServer
    store: Store
    manager: PilotManager
    policy: SitePolicy
    workdir: str  # the glideins' logs, on the execute side
    glideins: dict[str, SiteGlidein] = field(default_factory=dict)  # batch id -> glidein

    def submit_glideins(self, expected: int) -> list[SiteGlidein]:
        """One PilotMonitor pass; the glideins it submitted (their site jobs)."""
        before = set(self.store.submissions(SITE))
        # The PilotMonitor counts pilots: a glidein brings one per CPU (its agent's lanes).
        decided = monitor_cycle(self.store, self.manager, [self.policy], time.time())
        assert decided == {SITE: expected * CPUS}
        new = sorted(set(self.store.submissions(SITE)) - before)
        made = []
        for batch in new:
            cluster, proc = batch.split(".")
            (job,) = self.box.queue(f"ClusterId == {cluster} && ProcId == {proc}")
            glidein = SiteGlidein(str(job[GLIDEIN_ATTR]), int(cluster), CPUS, int(proc))
            self.glideins[batch] = glidein
            made.append(glidein)
        return made

    def running_glideins(self) -> list[tuple[str, SiteGlidein]]:
        """(batch, glidein) of the glideins whose site jobs run; when none does (a test run
        alone), a PilotMonitor pass submits them and they join the VO pool first."""
        running = [
            (b, g)
            for b, g in self.glideins.items()
            if (j := site_job(self.box, g)) and j["JobStatus"] == JobStatus.RUNNING
        ]
        if not running:
            fresh = self.submit_glideins(2)
            wait_glideins_joined(self.box, fresh, 120)
            running = [(b, g) for b, g in self.glideins.items() if g in fresh]
        return running

    def diagnosis(self) -> str:
        """What a failed wait reports: the Task Queue's pilots and master, the glideins' logs."""
        with self.store.engine.connect() as conn:
            pilots = conn.exec_driver_sql(
                "SELECT id, batch_id, state, task_id FROM pilots ORDER BY id"
            ).all()
            masters = conn.exec_driver_sql(
                "SELECT site, master_id, epoch, master_seen FROM site_state"
            ).all()
        logs = "".join(
            f"\n--- glidein {g.job_id}:\n{self.glidein_log(g)[-4000:]}"
            for g in self.glideins.values()
        )
        return f"pilots {pilots}; masters {masters} at {time.time():.0f}{logs}"

    def wait(self, probe: Callable[[], T | None], timeout: float, what: str) -> T:
        """``wait_for``, its error with the diagnosis."""
        try:
            return wait_for(probe, timeout, what)
        except CondorError as exc:
            raise AssertionError(f"{exc}\n{self.diagnosis()}") from None

    def glidein_log(self, glidein: SiteGlidein) -> str:
        path = self.box.host_path(f"{self.workdir}/glidein-{glidein.job_id}.err")
        return path.read_text(errors="replace") if path.exists() else ""

    def pilots(self, batch: str, state: str | None = None) -> list[tuple[Any, ...]]:
        """(id, state, task_id) of the Task Queue pilots of one glidein (its lanes)."""
        with self.store.engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT id, state, task_id FROM pilots WHERE batch_id = ?", (batch,)
            ).all()
        return [tuple(r) for r in rows if state is None or r[1] == state]

    def dht_nodes(self, batch: str) -> list[str]:
        """Where the glidein's lanes' site DHT nodes listen (as they registered)."""
        with self.store.engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT dht_address FROM pilots WHERE batch_id = ?", (batch,)
            ).all()
        return [str(r[0]) for r in rows if r[0]]

    def dht_answers(self, address: str) -> bool:
        """Does a node of the site DHT answer at ``address`` (a join through it)?"""
        with self.store.engine.connect() as conn:
            (key,) = conn.exec_driver_sql(
                "SELECT dht_key FROM site_state WHERE site = ?", (SITE,)
            ).one()

        async def join() -> bool:
            async with DhtNode(bytes.fromhex(key), read_only=True) as client:
                await client.start("127.0.0.1", 0, maintenance=False)
                try:
                    await client.join([parse_address(address)])
                except DhtError:
                    return False
                return True

        return asyncio.run(join())

    def completions(self, workflow: int) -> list[tuple[Any, ...]]:
        """(task id, attempt, pilot id, ok, at) of a workflow's reported tasks."""
        with self.store.engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT c.task_id, c.attempt, c.pilot_id, c.ok, c.at FROM completions c "
                "JOIN tasks t ON t.id = c.task_id WHERE t.workflow_id = ?",
                (workflow,),
            ).all()
        return [tuple(r) for r in rows]

    def task(self, task_id: int) -> dict[str, Any]:
        with self.store.engine.connect() as conn:
            row = conn.exec_driver_sql(
                "SELECT state, attempt, pilot_id FROM tasks WHERE id = ?", (task_id,)
            ).one()
        return {"state": row[0], "attempt": row[1], "pilot_id": row[2]}

    def task_ids(self, workflow: int) -> list[int]:
        with self.store.engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT id FROM tasks WHERE workflow_id = ? ORDER BY id", (workflow,)
            ).all()
        return [int(r[0]) for r in rows]

    def done(self, workflow: int) -> int:
        status = self.server.operator().status()
        (found,) = [w for w in status.workflows if w.id == workflow]
        return int(found.tasks["done"])

    def startd_history(self, glidein: SiteGlidein) -> list[dict[str, Any]]:
        """The fetched jobs the glidein's startd ran (its startd_history: HTCondor's record)."""
        job = site_job(self.box, glidein)
        assert job is not None
        sandbox = glidein_sandbox(self.nodes, str(job["GlobalJobId"]))
        assert sandbox is not None, glidein.name
        chroot = "/" + str(sandbox.relative_to(self.box.root))
        path = f"{chroot}/.glidein-ext/condor/log/startd_history"
        if not Path(self.box.host_path(path)).exists():
            return []
        out = self.box.run("condor_history", "-file", path, "-json", check=False)
        return [ad for ad in json.loads(out or "[]") if TASK_ATTR in ad]


def submit_workflow(server: TqServer, kind: str, scale: float, sleep: float) -> int:
    tag = f"{kind}-{os.getpid()}-{int(time.time())}"
    data = generate(kind, scale=scale, sleep=sleep)
    data["name"] = tag
    for task in data["tasks"]:  # files of their own: each workflow's LFNs are new
        for key in ("inputs", "outputs"):
            task[key] = [lfn.replace("/store/", f"/store/{tag}/") for lfn in task.get(key, [])]
    return int(server.operator().submit(data).workflow_id)


def site_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`glidein-ext site ...` on this host: the site admin, not on an execute node."""
    return subprocess.run(
        [sys.executable, "-m", "glidein_ext", "site", *args, "--pool", SITE_POOL.collector],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **HOST_CLIENT_ENV},
    )


@pytest.fixture(scope="module", params=["distributed", "centralized"])
def stack(
    request: pytest.FixtureRequest,
    sandbox: CondorSandbox,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    import htcondor2

    saved = {k: os.environ.get(k) for k in HOST_CLIENT_ENV}
    os.environ.update(HOST_CLIENT_ENV)  # the host's htcondor2 speaks to the chroot's schedd
    htcondor2.reload_config()
    nodes = start_site_nodes(sandbox, 2, 4, name="tqwn", cron_period=3)
    # Delgado Peris 2014 §IV: the glideins' lanes join the site DHT; distributed: a master
    # pilot's rounds assign the tasks, centralized: the TQ does.
    architecture = str(request.param)
    server = TqServer(tmp_path_factory.mktemp("tq"), architecture=architecture).start()
    store = Store(make_engine(server.database))
    store.load()
    manager = PilotManager(SITE_POOL.collector, credentials=store)
    workdir = sandbox.make_dir(f"tq-glideins-{os.getpid()}")
    se_dir = sandbox.make_dir(f"tq-se-{os.getpid()}")
    job = PilotJob(
        tq_url=server.url,
        workdir_base=workdir,
        executable=CHROOT_BIN,
        requirements=" || ".join(f"({n.requirements()})" for n in nodes),
        extra_args=(
            *("--cron-period", "3", "--fetch-delay", "2", "--se-dir", se_dir),
            *("--deadline-margin", "10", "--max-vacate-time", "5", "--verbose"),
        ),
        environment={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        request_memory=512,
        cpus=CPUS,
        collector=VO_POOL.collector,
        base_config=GLIDEIN_BASE_CONFIG,
    )
    policy = SitePolicy(
        SITE, Thresholds(min_pilots=2 * CPUS, max_pilots=2 * CPUS, min_idle_pilots=0), job
    )
    stack = Stack(sandbox, sandbox.on(VO_POOL), nodes, server, store, manager, policy, workdir)
    try:
        yield stack
    finally:
        stack.vo.remove("GlideinExtVoJob =!= undefined")
        manager.remove(list(store.submissions(SITE)))
        # The next architecture's stack must not see these glideins' slots: they leave first.
        with contextlib.suppress(CondorError):
            wait_for(
                lambda: not stack.vo.status("GLIDEIN_ExtName =!= undefined") or None,
                120,
                "the glideins to leave the VO pool",
            )
        store.engine.dispose()
        server.stop()
        stop_site_nodes(nodes)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        htcondor2.reload_config()


def test_pilot_manager_glideins_run_a_workflow_through_fetch_work(stack: Stack) -> None:
    workflow = submit_workflow(stack.server, "w1", scale=0.05, sleep=4)  # 4 chains: 8 tasks
    glideins = stack.submit_glideins(2)
    for g in glideins:  # real glideins: `glidein-ext wrapper --tq` site jobs, a credential each
        (job,) = stack.box.queue(g.site_constraint())
        arguments = str(job.get("Arguments") or job.get("Args"))
        assert "wrapper" in arguments and "--tq-token-file tq-credential" in arguments
        assert job["GlideinExtTqCredential"] > 0
    wait_glideins_joined(stack.box, glideins, 120)
    # A VO user's job, matched by the VO negotiator, beside the fetched work.
    vo_dir = stack.vo.make_dir(f"tq-vo-{os.getpid()}")
    vo_job = submit_vo_jobs(stack.vo, vo_dir, "beside", glideins[0], [VoJob(3, 1, 1)])
    running = wait_for(
        lambda: stack.vo.status(f"{TASK_ATTR} =!= undefined") or None,
        60,
        "a fetched task in a glidein's slot",
        interval=0.5,
    )
    assert {str(ad["GLIDEIN_ExtName"]) for ad in running} <= {g.name for g in glideins}
    wait_for(lambda: stack.done(workflow) == 8 or None, 100, "the W1 workflow to complete")
    (beside,) = wait_for(
        lambda: stack.vo.history(f"ClusterId == {vo_job}") or None, 90, "the VO user's job"
    )
    host = str(beside.get("LastRemoteHost") or beside.get("RemoteHost"))
    assert beside["ExitCode"] == 0 and glideins[0].name in host, beside
    # Every task ran as a job fetched by a glidein's startd (HTCondor's own record of it).
    fetched = [ad for g in glideins for ad in stack.startd_history(g)]
    tasks = {(ad[TASK_ATTR], ad["GlideinExtTqAttempt"]) for ad in fetched}
    done = stack.completions(workflow)
    assert {(c[0], c[1]) for c in done} <= tasks, (done, fetched)
    # Fetched work (HookKeyword), completed (JobStatus 4) -- fetched jobs carry no ExitCode here.
    assert all(ad["HookKeyword"] == "GLIDEINEXT" and ad["JobStatus"] == 4 for ad in fetched)
    # Reported by the glideins' own lanes (two per glidein), over both glideins.
    lanes = {p[0]: b for b in stack.glideins for p in stack.pilots(b)}
    assert len(lanes) == 2 * CPUS
    for batch in stack.glideins:  # each lane joined the site DHT (Delgado Peris 2014 §III.A)
        nodes = stack.dht_nodes(batch)
        assert len(nodes) == CPUS and all(stack.dht_answers(a) for a in nodes), nodes
    assert {lanes[c[2]] for c in done} == set(stack.glideins)
    # A partitionable slot ran several tasks at once: two dynamic slots seen busy together, or
    # two tasks of one glidein overlapping in the startd history.
    by_glidein: dict[str, list[tuple[int, int]]] = {}
    for g in glideins:
        for ad in stack.startd_history(g):
            end = int(ad["CompletionDate"])
            by_glidein.setdefault(g.name, []).append((end - int(ad["RemoteWallClockTime"]), end))
    overlaps = [
        name
        for name, spans in by_glidein.items()
        if any(a[0] < b[1] and b[0] < a[1] for a in spans for b in spans if a != b)
    ]
    assert overlaps, by_glidein


def _site_job_ended(stack: Stack, glidein: SiteGlidein, timeout: float, what: str) -> Any:
    """The glidein's site job once it completed (its ad, from the site pool's history)."""
    return wait_for(
        lambda: (j := site_job(stack.box, glidein)) and j["JobStatus"] == JobStatus.COMPLETED and j,
        timeout,
        what,
    )


def _started(log: str) -> set[int]:
    """Tasks the glidein's startd started (PREPARE_JOB), from its agent's log."""
    return {int(t) for t in re.findall(r"task (\d+) started by the startd", log)}


def _given_back(log: str) -> set[int]:
    """Tasks the glidein's agent gave back to the Task Queue (not run to their end)."""
    return {int(t) for t in re.findall(r"task (\d+) given back", log)}


def test_vacated_glidein_finishes_its_task_fetches_nothing_and_leaves(stack: Stack) -> None:
    # Tasks long enough that the victim still runs one when its drain order arrives: the order
    # takes a startd cron period or two and, on a loaded machine, much longer (10 s was seen
    # to be too short).
    victim_batch, victim = stack.running_glideins()[0]
    workflow = submit_workflow(stack.server, "w1", scale=0.05, sleep=25)

    def running() -> set[int] | None:
        busy = {p[2] for p in stack.pilots(victim_batch) if p[2] is not None}
        return busy & _started(stack.glidein_log(victim)) or None

    wait_for(running, 60, "the victim's startd running a task", interval=0.5)
    proc = site_cli("vacate", victim.job_id, "--deadline", "1h")
    assert proc.returncode == 0, proc.stderr
    wait_for(
        lambda: (
            all(a.get("GLIDEIN_RetireNow") for a in stack.vo.status(victim.vo_constraint())) or None
        ),
        30,
        "the victim retiring",
        interval=0.5,
    )
    # The agent closes its board (no more fetches) when it sees the drain order: it says so.
    wait_for(lambda: "the glidein retires" in stack.glidein_log(victim), 20, "the agent draining")
    lanes = stack.pilots(victim_batch)
    ids = {p[0] for p in lanes}
    # What its startd was running when it stopped fetching. A task fetched but not yet started
    # goes back to the Task Queue (no new job starts once a glidein retires, Sfiligoi 2013).
    held = {p[2] for p in lanes if p[2] is not None} & _started(stack.glidein_log(victim))
    before = {c[0] for c in stack.completions(workflow) if c[2] in ids}
    assert held, "the victim's task ended before the drain began: make the tasks longer"
    # Its site job ends, exit 0 (the glidein drained: its task finished, its agent left).
    ended = _site_job_ended(stack, victim, 90, "the victim's site job to end")
    assert ended["ExitCode"] == 0
    lanes = stack.pilots(victim_batch)
    assert lanes and all(state == "gone" for _, state, _ in lanes), lanes  # it left the TQ
    gone = stack.dht_nodes(victim_batch)
    assert gone and not any(stack.dht_answers(a) for a in gone), gone  # and the site DHT
    assert "leaving the site DHT failed" not in stack.glidein_log(victim)  # by LEAVE
    victims = [c for c in stack.completions(workflow) if c[2] in ids]
    assert all(c[3] for c in victims), victims  # what it ran, it finished
    log = stack.glidein_log(victim)
    drained = log[log.index("the glidein retires") :]
    assert not held & _given_back(drained), log[-3000:]  # none that ran was evicted
    assert held <= {c[0] for c in victims}, (held, victims)  # its running tasks finished
    assert {c[0] for c in victims} <= before | held, victims  # and it fetched nothing new
    assert not stack.vo.status(victim.vo_constraint())
    wait_for(lambda: stack.done(workflow) == 8 or None, 240, "the workflow to complete")


def test_deadline_evicts_the_task_which_the_tq_requeues_elsewhere(stack: Stack) -> None:
    # Whichever glidein runs the long task gets the deadline (after the drain test, one is left).
    remaining = stack.running_glideins()
    long = {"name": "long", "command": "sleep 40", "max_runtime": 600}
    workflow = int(
        stack.server.operator()
        .submit({"name": f"deadline-{os.getpid()}", "tasks": [long]})
        .workflow_id
    )
    (task,) = stack.task_ids(workflow)

    def running() -> tuple[str, SiteGlidein] | None:
        for batch, glidein in remaining:
            if any(p[2] == task for p in stack.pilots(batch)):
                return batch, glidein
        return None

    batch, glidein = wait_for(running, 60, "the long task running in a glidein", interval=0.5)
    assert stack.task(task)["attempt"] == 1
    # A fresh glidein is submitted for the one that will go (the PilotMonitor's minPilots: two
    # glideins; after the drain test one is left).
    fresh = stack.submit_glideins(2 - len(remaining))
    slot = f"{TASK_ATTR} == {task} && GLIDEIN_ExtName == {json.dumps(glidein.name)}"
    wait_for(lambda: stack.vo.status(slot) or None, 30, "the task's slot", interval=0.5)
    proc = site_cli("vacate", glidein.job_id, "--deadline", "30s")
    assert proc.returncode == 0, proc.stderr
    deadline = time.time() + 30
    # HTCondor ends the task's claim before the deadline (retirement ends at deadline - margin).
    wait_for(lambda: not stack.vo.status(slot), 40, "the task vacated", interval=0.5)
    assert time.time() < deadline, "the task outlived the glidein's deadline"
    ended = _site_job_ended(stack, glidein, 60, "the glidein with the deadline to end")
    assert ended["ExitCode"] == 0
    # HTCondor vacated the task before the deadline (its JOB_EXIT said "evict"), not reported
    # as a failure: the Task Queue requeued it.
    log = stack.glidein_log(glidein)
    assert f"task {task} evicted: HTCondor ended the job (evict)" in log, log[-3000:]
    # The glidein itself ends a few seconds after its task (its startd, then condor_master).
    print(f"deadline glidein ended {ended['CompletionDate'] - deadline:+.0f} s from the deadline")
    assert ended["CompletionDate"] <= deadline + 30
    assert not [c for c in stack.completions(workflow) if c[0] == task]  # nothing reported
    if fresh:
        wait_glideins_joined(stack.box, fresh, 90)
    # Distributed, the leaving glidein's lane may have been the master: its resign hands the
    # role on at once (test_tq_master_leaves times that); a master that could not say so is
    # replaced after the Task Queue's master timeout (60 s), so the wait covers that too.
    again = stack.wait(
        lambda: (t := stack.task(task))["attempt"] >= 2 and t["state"] == "running" and t,
        120,
        "the task running again",
    )
    # Elsewhere: on the fresh glidein, or on another that was already there.
    assert again["pilot_id"] not in {p[0] for p in stack.pilots(batch)}
    wait_for(lambda: stack.done(workflow) == 1 or None, 70, "the requeued task to complete")
