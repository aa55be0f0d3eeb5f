"""The PilotManager (Hasham 2011 §IV, IV-A): pilots submitted as jobs to an HTCondor schedd.

This module is the one boundary over htcondor2 for the Task Queue; htcondor2 is imported inside
the functions (nothing at import), and its errors become CondorError.  The PilotMonitor's pass that
decides what to submit is ``tq.manager.monitor.run_cycle``; the PilotManager is its
``PilotSubmitter``.

Per-pilot credentials (``tq.client.credentials``): given a ``CredentialIssuer`` (the store), the
manager mints one credential of the site per job and hands it over without it ever being in the job
ad (readable by anyone who can ``condor_q``): each secret is written to a mode-0600 file in its own
0700 directory under a private temporary directory, the job transfers that file
(``transfer_input_files``, one directory per job through the submit's item data) and the agent
reads it (``--token-file``, refused by the agent if group or others may read it).  The jobs are
spooled: the schedd keeps its copy of the files, so the local ones are deleted as soon as the
submit returns.  The helpers (``write_secret_files``, ``with_credential_files``,
``credential_items``) serve whoever builds another pilot job description.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from glidein_ext.condor import ALIVE_STATES, JobStatus, condor_errors, schedd
from glidein_ext.errors import CondorError, TaskQueueError
from glidein_ext.tq.client.credentials import IssuedCredential

log = logging.getLogger("glidein_ext.tq.manager.monitor")

# The credential's file name in the job's scratch directory (a name, not a secret).
TOKEN_FILE = "tq-credential"  # noqa: S105
CREDENTIAL_DIR = "GlideinExtTqCredentialDir"  # item data: the job's private directory
CREDENTIAL_ID = "GlideinExtTqCredentialId"  # item data: the job's credential (its id, no secret)


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
    # A real glidein: the site job is `glidein-ext wrapper --tq`, whose startd joins
    # this collector (the VO pool) and pulls the site's tasks through its fetch-work hooks.
    # None: a bare `pilot run` job.
    collector: str | None = None
    base_config: str | None = None  # the glidein's base HTCondor config on the worker node

    @property
    def pilots_per_job(self) -> int:
        """Task Queue pilots one job brings: a glidein's lanes (one per CPU), else one."""
        return self.cpus if self.collector else 1

    # Several schedds per site (tq.manager.schedds): the batch ids' prefix naming the schedd
    # ("name/").
    batch_prefix: str = ""


class CredentialIssuer(Protocol):
    """Where the PilotManager mints each job's credential (``tq.service.store.Store``)."""

    def mint_credentials(
        self, site: str, count: int = 1, *, ttl: float | None = None, note: str = ""
    ) -> list[IssuedCredential]: ...

    def bind_credentials(self, pairs: Sequence[tuple[int, str]]) -> None: ...

    def revoke_credential(self, credential_id: int) -> list[int]: ...


def write_secret_files(directory: Path, issued: Sequence[IssuedCredential]) -> list[Path]:
    """Each credential's secret in ``<directory>/<id>/tq-credential``: the directory 0700, the
    file 0600 (created so, never wider); the per-credential directories, in order.
    ``directory`` should be private itself (``tempfile.TemporaryDirectory`` makes it 0700)."""
    made = []
    for credential in issued:
        home = directory / str(credential.id)
        home.mkdir(mode=0o700)
        home.chmod(0o700)  # whatever the umask did
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(home / TOKEN_FILE, flags, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(credential.secret + "\n")
        made.append(home)
    return made


def credential_items(
    issued: Sequence[IssuedCredential], directories: Sequence[Path]
) -> list[dict[str, str]]:
    """The submit's item data: one job per credential, each with its directory and id."""
    return [
        {CREDENTIAL_DIR: str(home), CREDENTIAL_ID: str(credential.id)}
        for credential, home in zip(issued, directories, strict=True)
    ]


def with_credential_files(description: Mapping[str, str]) -> dict[str, str]:
    """``description`` changed so that each job transfers its own credential file (from the
    item data's directory) into its scratch directory as ``tq-credential``, and nothing back;
    the job ad names the credential's id (``GlideinExtTqCredential``), never its secret.  Submit
    it with ``spool=True`` and the items of ``credential_items``; the agent takes
    ``--token-file tq-credential``."""
    return {
        **description,
        "should_transfer_files": "YES",
        "when_to_transfer_output": "ON_EXIT",
        "transfer_input_files": f"$({CREDENTIAL_DIR})/{TOKEN_FILE}",
        "transfer_output_files": '""',
        # Spooled jobs stay in the queue after they end, waiting for their output to be
        # fetched; pilots have none to fetch.
        "leave_in_queue": "false",
        "My.GlideinExtTqCredential": f"$({CREDENTIAL_ID})",
    }


def _quote(value: str) -> str:
    """A word for HTCondor's new arguments/environment syntax (single quotes, doubled inside)."""
    if '"' in value:
        raise CondorError(f"a pilot argument cannot contain a double quote: {value!r}")
    if value and all(c.isalnum() or c in "/:._-+,=@%$()" for c in value):
        return value
    return "'" + value.replace("'", "''") + "'"


# With file transfer the job's stdout and stderr would go back to the submit side (the spool);
# the pilot's log stays on the execute side, at <workdir>/pilot-<cluster>.<proc>.out/.err, by
# this shell line (its $0: that path without the suffix; "" is HTCondor's quoted double quote).
_LOG_TO_WORKDIR = '\'exec ""$@"" >>""$0.out"" 2>>""$0.err""\''


def pilot_description(site: str, job: PilotJob, token_file: str | None = None) -> dict[str, str]:
    """The submit description of ``site``'s pilot jobs: ``glidein-ext pilot run`` with the
    site's arguments.  ``token_file``: the credential's file in the job's scratch directory
    (``--token-file``; add ``with_credential_files``); then the log is redirected by a shell."""
    logs = f"{job.workdir_base}/pilot-$(ClusterId).$(ProcId)"
    args = [
        "pilot",
        "run",
        "--tq",
        job.tq_url,
        "--site",
        site,
        "--workdir",
        logs,
        "--cpus",
        str(job.cpus),
        "--memory",
        str(job.request_memory),
        "--disk",
        str(max(1, job.request_disk // 1024)),
        *(("--ttl", str(job.ttl)) if job.ttl else ()),
        *(("--token-file", token_file) if token_file else ()),
        *job.extra_args,
    ]
    env = {
        **job.environment,
        "GLIDEIN_EXT_TQ_BATCH_ID": f"{job.batch_prefix}$(ClusterId).$(ProcId)",
    }
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
        "output": f"{logs}.out",
        "error": f"{logs}.err",
        "request_cpus": str(job.cpus),
        "request_memory": str(job.request_memory),
        "request_disk": str(job.request_disk),
        "requirements": job.requirements,
        "My.GlideinExtTqSite": f'"{site}"',
    }
    if token_file:
        del description["output"], description["error"]
        words = ["-c", _LOG_TO_WORKDIR, _quote(logs), _quote(job.executable)]
        description["executable"] = "/bin/sh"
        description["arguments"] = '"' + " ".join([*words, *(_quote(a) for a in args)]) + '"'
    if job.ttl:
        description["periodic_remove"] = (
            f"JobStatus == {JobStatus.RUNNING.value} && "
            f"time() - EnteredCurrentStatus > {job.ttl + 600}"
        )
    return description


def glidein_description(site: str, job: PilotJob, token_file: str) -> dict[str, str]:
    """The submit description of ``site``'s glideins (``job.collector`` set): the site job runs
    ``glidein-ext wrapper --tq`` in its scratch directory (the glidein's start directory, where
    the site's cron reads ``.pilot.ad``); its condor_master and startd join ``job.collector``; its
    pilot agent registers with the credential in ``token_file`` and hands its tasks to the
    startd.  Add ``with_credential_files``.  The glidein's log stays on the execute side, at
    ``<workdir>/glidein-<cluster>.<proc>.out/.err``."""
    if not job.collector:
        raise CondorError("a glidein needs the collector of the pool its startd joins")
    logs = f"{job.workdir_base}/glidein-$(ClusterId).$(ProcId)"
    memory = job.request_memory
    args = [
        "wrapper",
        *("--start-dir", ".", "--name", f"glidein-{site}-$(ClusterId).$(ProcId)"),
        *("--cpus", str(job.cpus), "--memory", str(memory), "--collector", job.collector),
        *(("--base-config", job.base_config) if job.base_config else ()),
        *("--site", site, "--tq", job.tq_url, "--tq-token-file", token_file),
        *(("--lifetime", str(job.ttl)) if job.ttl else ()),
        *job.extra_args,
    ]
    env = {
        **job.environment,
        "GLIDEIN_EXT_TQ_BATCH_ID": f"{job.batch_prefix}$(ClusterId).$(ProcId)",
    }
    words = ["-c", _LOG_TO_WORKDIR, _quote(logs), _quote(job.executable)]
    description = {
        "universe": "vanilla",
        "executable": "/bin/sh",
        "transfer_executable": "false",
        "arguments": '"' + " ".join([*words, *(_quote(a) for a in args)]) + '"',
        "environment": '"' + " ".join(f"{k}={_quote(v)}" for k, v in sorted(env.items())) + '"',
        "initialdir": job.submit_dir,
        "skip_filechecks": "true",
        "request_cpus": str(job.cpus),
        "request_memory": str(memory),
        "request_disk": str(job.request_disk),
        "requirements": job.requirements,
        "My.GlideinExtTqSite": f'"{site}"',
        "My.GlideinExtGlidein": f'"glidein-{site}-$(ClusterId).$(ProcId)"',
    }
    if job.ttl:  # the wrapper retires it at its lifetime; this is the batch system's backstop
        description["periodic_remove"] = (
            f"JobStatus == {JobStatus.RUNNING.value} && "
            f"time() - EnteredCurrentStatus > {job.ttl + 600}"
        )
    return description


# HoldReasonCode 16 (SpoolingInput): a spooled job (its credential file) is held until the schedd
# has its input files; it is on its way, not gone.
SPOOLING_INPUT = 16


def _alive(ad: Mapping[str, Any]) -> bool:
    """A job still idle or running, or held only while its input files are spooled."""
    if ad["JobStatus"] in ALIVE_STATES:
        return True
    return bool(ad["JobStatus"] == JobStatus.HELD and ad.get("HoldReasonCode") == SPOOLING_INPUT)


class PilotManager:
    """Submits pilots to one schedd and asks which of them are still queued; with
    ``credentials``, each pilot job gets its own credential (see the module's doc)."""

    def __init__(
        self,
        pool: str | None = None,
        schedd_name: str | None = None,
        credentials: CredentialIssuer | None = None,
    ) -> None:
        self.pool = pool
        self.schedd_name = schedd_name
        self.credentials = credentials

    def _schedd(self) -> Any:
        import htcondor2

        with condor_errors("cannot locate the schedd"):
            return schedd(htcondor2, self.pool, self.schedd_name)

    def locate(self) -> None:
        """Raise CondorError unless the schedd can be found (a dry run's reachability check)."""
        self._schedd()

    def submit(self, site: str, count: int, job: PilotJob) -> list[str]:
        """Submit ``count`` pilots for ``site``; their batch ids ("cluster.proc")."""
        import htcondor2

        if count <= 0:
            return []
        if self.credentials is not None:
            return self._submit_with_credentials(self.credentials, site, count, job)
        if job.collector:
            raise CondorError("glideins are submitted with per-pilot credentials only")
        description = pilot_description(site, job)
        with condor_errors(f"cannot submit {count} pilot(s) for {site}"):
            result = self._schedd().submit(htcondor2.Submit(description), count=count)
            cluster = result.cluster()
            procs = result.num_procs()
        return [f"{job.batch_prefix}{cluster}.{proc}" for proc in range(procs)]

    def _submit_with_credentials(
        self, issuer: CredentialIssuer, site: str, count: int, job: PilotJob
    ) -> list[str]:
        """One credential per job, its file transferred (spooled) with the job; the local
        files are gone when this returns, the credentials bound to their jobs.  On a failure
        the credentials are revoked and a half-submitted cluster removed."""
        import htcondor2

        schedd = self._schedd()  # before minting: a schedd that is down costs no credential
        if job.collector:  # a real glidein
            description = with_credential_files(glidein_description(site, job, TOKEN_FILE))
        else:
            description = with_credential_files(pilot_description(site, job, TOKEN_FILE))
        issued = issuer.mint_credentials(site, count, note=f"PilotManager job of {site}")
        cluster: int | None = None
        try:
            with tempfile.TemporaryDirectory(prefix="glidein-ext-credentials-") as private:
                items = credential_items(issued, write_secret_files(Path(private), issued))
                with condor_errors(f"cannot submit {count} pilot(s) for {site}"):
                    result = schedd.submit(
                        htcondor2.Submit(description), spool=True, itemdata=iter(items)
                    )
                    cluster = result.cluster()
                    procs = result.num_procs()
                    batch_ids = [f"{job.batch_prefix}{cluster}.{proc}" for proc in range(procs)]
                    # bound before the files reach the schedd: the job cannot run before that
                    issuer.bind_credentials(
                        [(c.id, b) for c, b in zip(issued, batch_ids, strict=True)]
                    )
                    schedd.spool(result)
        except BaseException:
            self._withdraw(issuer, issued, cluster)
            raise
        return batch_ids

    def _withdraw(
        self, issuer: CredentialIssuer, issued: Sequence[IssuedCredential], cluster: int | None
    ) -> None:
        """After a failed submit: its credentials revoked, its cluster (if any) removed: a
        spooled job whose files never came would wait on hold for ever."""
        try:
            for credential in issued:
                issuer.revoke_credential(credential.id)
        except TaskQueueError as exc:
            log.error("cannot revoke the credentials of a failed submit: %s", exc)
        if cluster is not None:
            self._abandon(cluster)

    def _abandon(self, cluster: int) -> None:
        import htcondor2

        try:
            with condor_errors(f"cannot remove the half-submitted cluster {cluster}"):
                self._schedd().act(htcondor2.JobAction.Remove, f"ClusterId == {cluster}")
        except CondorError as exc:
            log.warning("%s", exc)

    def alive(self, batch_ids: Sequence[str]) -> set[str]:
        """The batch ids still idle or running in the schedd (or held while spooling)."""
        if not batch_ids:
            return set()
        clusters = sorted({int(b.split(".")[0]) for b in batch_ids})
        constraint = " || ".join(f"ClusterId == {c}" for c in clusters)
        with condor_errors("cannot query the schedd"):
            ads = self._schedd().query(
                constraint=f"({constraint})",
                projection=["ClusterId", "ProcId", "JobStatus", "HoldReasonCode"],
            )
        found = {f"{ad['ClusterId']}.{ad['ProcId']}" for ad in ads if _alive(ad)}
        return found & set(batch_ids)

    def load(self, site: str) -> int:
        """``site``'s pilot jobs in this schedd still idle or running (or spooling): its load
        (several schedds per site, ``tq.manager.schedds``).  ``site`` is a checked site name."""
        with condor_errors("cannot query the schedd"):
            ads = self._schedd().query(
                constraint=f'GlideinExtTqSite == "{site}"',
                projection=["JobStatus", "HoldReasonCode"],
            )
        return sum(1 for ad in ads if _alive(ad))

    def remove(self, batch_ids: Sequence[str]) -> None:
        import htcondor2

        if not batch_ids:
            return
        with condor_errors("cannot remove pilots"):
            self._schedd().act(htcondor2.JobAction.Remove, list(batch_ids))
