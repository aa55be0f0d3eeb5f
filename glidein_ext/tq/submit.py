"""The PilotManager (seed 001 IV, IV-A): pilots submitted as jobs to an HTCondor schedd.

This module is the one boundary over htcondor2 for the Task Queue; htcondor2 is imported inside
the functions (nothing at import), and its errors become CondorError.  The PilotMonitor's pass that
decides what to submit is ``tq.monitor.run_cycle``; the PilotManager is its ``PilotSubmitter``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from glidein_ext.condor import ALIVE_STATES, JobStatus, condor_errors
from glidein_ext.errors import CondorError


@dataclass(frozen=True)
class PilotJob:
    """How one site's pilots are started: the agent command and where it runs."""

    tq_url: str
    workdir_base: str  # absolute, on the execute side: pilots' work directories and logs go here
    executable: str = "glidein-ext"
    submit_dir: str = "/"  # the job's initialdir, checked on the submit side
    requirements: str = "true"
    extra_args: Sequence[str] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    request_memory: int = 256
    request_disk: int = 1024 * 1024  # KiB
    cpus: int = 1
    ttl: int | None = None  # seconds of pilot life: `--ttl`, and the job is removed 10 min later


def _quote(value: str) -> str:
    """A word for HTCondor's new arguments/environment syntax (single quotes, doubled inside)."""
    if '"' in value:
        raise CondorError(f"a pilot argument cannot contain a double quote: {value!r}")
    if value and all(c.isalnum() or c in "/:._-+,=@%$()" for c in value):
        return value
    return "'" + value.replace("'", "''") + "'"


class PilotManager:
    """Submits pilots to one schedd and asks which of them are still queued."""

    def __init__(self, pool: str | None = None, schedd_name: str | None = None) -> None:
        self.pool = pool
        self.schedd_name = schedd_name

    def _schedd(self) -> Any:
        import htcondor2

        with condor_errors("cannot locate the schedd"):
            collector = htcondor2.Collector(self.pool) if self.pool else htcondor2.Collector()
            if self.schedd_name:
                ad = collector.locate(htcondor2.DaemonType.Schedd, self.schedd_name)
            else:
                ad = collector.locate(htcondor2.DaemonType.Schedd)
            return htcondor2.Schedd(ad)

    def locate(self) -> None:
        """Raise CondorError unless the schedd can be found (a dry run's reachability check)."""
        self._schedd()

    def submit(self, site: str, count: int, job: PilotJob) -> list[str]:
        """Submit ``count`` pilots for ``site``; their batch ids ("cluster.proc")."""
        import htcondor2

        if count <= 0:
            return []
        args = [
            "pilot",
            "run",
            "--tq",
            job.tq_url,
            "--site",
            site,
            "--workdir",
            f"{job.workdir_base}/pilot-$(ClusterId).$(ProcId)",
            "--cpus",
            str(job.cpus),
            "--memory",
            str(job.request_memory),
            "--disk",
            str(max(1, job.request_disk // 1024)),
            *(("--ttl", str(job.ttl)) if job.ttl else ()),
            *job.extra_args,
        ]
        env = {**job.environment, "GLIDEIN_EXT_TQ_BATCH_ID": "$(ClusterId).$(ProcId)"}
        description = {
            "universe": "vanilla",
            "executable": job.executable,
            "transfer_executable": "false",
            "arguments": '"' + " ".join(_quote(a) for a in args) + '"',
            # HTCondor's "new" environment syntax: the whole value in double quotes.
            "environment": '"' + " ".join(f"{k}={_quote(v)}" for k, v in sorted(env.items())) + '"',
            "initialdir": job.submit_dir,
            "should_transfer_files": "NO",
            # The directories live on the execute side (another host, or the test chroot).
            "skip_filechecks": "true",
            "output": f"{job.workdir_base}/pilot-$(ClusterId).$(ProcId).out",
            "error": f"{job.workdir_base}/pilot-$(ClusterId).$(ProcId).err",
            "request_cpus": str(job.cpus),
            "request_memory": str(job.request_memory),
            "request_disk": str(job.request_disk),
            "requirements": job.requirements,
            "My.GlideinExtTqSite": f'"{site}"',
        }
        if job.ttl:
            description["periodic_remove"] = (
                f"JobStatus == {JobStatus.RUNNING.value} && "
                f"time() - EnteredCurrentStatus > {job.ttl + 600}"
            )
        with condor_errors(f"cannot submit {count} pilot(s) for {site}"):
            result = self._schedd().submit(htcondor2.Submit(description), count=count)
            cluster = result.cluster()
            procs = result.num_procs()
        return [f"{cluster}.{proc}" for proc in range(procs)]

    def alive(self, batch_ids: Sequence[str]) -> set[str]:
        """The batch ids still idle or running in the schedd."""
        if not batch_ids:
            return set()
        clusters = sorted({int(b.split(".")[0]) for b in batch_ids})
        constraint = " || ".join(f"ClusterId == {c}" for c in clusters)
        with condor_errors("cannot query the schedd"):
            ads = self._schedd().query(
                constraint=f"({constraint})", projection=["ClusterId", "ProcId", "JobStatus"]
            )
        found = {
            f"{ad['ClusterId']}.{ad['ProcId']}" for ad in ads if ad["JobStatus"] in ALIVE_STATES
        }
        return found & set(batch_ids)

    def remove(self, batch_ids: Sequence[str]) -> None:
        import htcondor2

        if not batch_ids:
            return
        with condor_errors("cannot remove pilots"):
            self._schedd().act(htcondor2.JobAction.Remove, list(batch_ids))
