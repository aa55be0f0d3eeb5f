"""The Task Queue's tables (SQLAlchemy Core); the migrations in ``migrations/`` create them."""

from __future__ import annotations

from sqlalchemy import (
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

workflows = Table(
    "workflows",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), nullable=False),
    Column("submitted_at", Float, nullable=False),
)

tasks = Table(
    "tasks",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("workflow_id", Integer, ForeignKey("workflows.id"), nullable=False),
    Column("name", String(200), nullable=False),
    Column("step", Integer, nullable=False),
    Column("command", Text, nullable=False),
    Column("spec", Text, nullable=False),  # MatchSpec as JSON
    Column("inputs", Text, nullable=False),  # JSON list of LFNs
    Column("outputs", Text, nullable=False),
    Column("after", Text, nullable=False),  # JSON list of task ids
    Column("priority", Integer, nullable=False),
    Column("max_retries", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("attempt", Integer, nullable=False),  # bumped at each assignment
    Column("failures", Integer, nullable=False),
    Column("pilot_id", Integer, nullable=True),
    Column("runnable_since", Float, nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("report", Text, nullable=True),
    Column("finished_at", Float, nullable=True),
    UniqueConstraint("workflow_id", "name", name="uq_tasks_workflow_name"),
    Index("ix_tasks_state", "state"),
    Index("ix_tasks_workflow_state", "workflow_id", "state"),  # a workflow's unfinished tasks
)


def _task_lfns(name: str) -> Table:
    """The LFNs a task reads or writes: one row per task and LFN, indexed by LFN."""
    return Table(
        name,
        metadata,
        Column("task_id", Integer, ForeignKey("tasks.id"), primary_key=True),
        Column("lfn", String(1024), primary_key=True),
        Index(f"ix_{name}_lfn", "lfn"),
    )


task_inputs = _task_lfns("task_inputs")
# Who produces what (Hasham 2011 §IV): at submit, an output another unfailed task produces is
# refused.
task_outputs = _task_lfns("task_outputs")

task_after = Table(
    "task_after",
    metadata,
    Column("task_id", Integer, ForeignKey("tasks.id"), primary_key=True),
    Column("after_id", Integer, ForeignKey("tasks.id"), primary_key=True),
    Index("ix_task_after_after", "after_id"),
)

files = Table(
    "files",
    metadata,
    Column("lfn", String(1024), primary_key=True),
    Column("produced_by", Integer, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("site", String(200), nullable=True),  # where it was produced (Delgado Peris 2014 §III.B)
    Index("ix_files_produced_by", "produced_by"),  # a completion marks its files' site
)

pilots = Table(
    "pilots",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("site", String(200), nullable=False),
    Column("host", String(255), nullable=False),
    Column("se", String(255), nullable=False),
    Column("cpus", Integer, nullable=False),
    Column("memory", Integer, nullable=False),
    Column("disk", Integer, nullable=False),
    Column("expires_at", Float, nullable=True),
    Column("attributes", Text, nullable=False),
    Column("requirements", Text, nullable=False),
    Column("rank", Text, nullable=False),
    Column("cache_dir", Text, nullable=False),
    Column("cached", Text, nullable=False),  # JSON list: the TQ's view of the pilot's cache
    Column("batch_id", String(200), nullable=True),  # the batch job that started it
    Column("dht_id", String(80), nullable=True),
    Column("state", String(16), nullable=False),
    Column("task_id", Integer, nullable=True),
    Column("registered_at", Float, nullable=False),
    Column("last_seen", Float, nullable=False),
    Column("dht_address", String(300), nullable=True),  # "host:port" of its DHT node
    Column("peer_url", String(300), nullable=True),  # its peer file server
    # The credential it registered with (tq.client.credentials); NULL: the shared pilot token.
    Column("credential_id", Integer, nullable=True),
    Index("ix_pilots_state", "state"),
    Index("ix_pilots_host", "host"),
    Index("ix_pilots_site", "site"),
    Index("ix_pilots_credential", "credential_id"),
)

# One row per site with a DHT (Delgado Peris 2014): its key, and in the distributed architecture its
# master and the epoch handed out with the role (a call with an older epoch is refused).
site_state = Table(
    "site_state",
    metadata,
    Column("site", String(200), primary_key=True),
    Column("dht_key", String(128), nullable=False),  # hex
    Column("master_id", Integer, nullable=True),
    Column("epoch", Integer, nullable=False),
    Column("master_seen", Float, nullable=True),  # the master's last call
    # hex; no pilot sees it: each pilot's key derives from it (tq.client.pilotkeys)
    Column("pilot_secret", String(128), nullable=True),
)

# One row per accepted completion: the unique key makes counting a completion twice impossible.
completions = Table(
    "completions",
    metadata,
    Column("task_id", Integer, ForeignKey("tasks.id"), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("pilot_id", Integer, nullable=False),
    Column("exit_code", Integer, nullable=False),
    Column("ok", Integer, nullable=False),
    Column("at", Float, nullable=False),
)

# Pilots the PilotManager submitted to a batch system (Hasham 2011 §IV-A: inactive until they
# register).
submissions = Table(
    "submissions",
    metadata,
    Column("batch_id", String(200), primary_key=True),
    Column("site", String(200), nullable=False),
    Column("submitted_at", Float, nullable=False),
    Column("state", String(16), nullable=False),  # inactive, registered, vanished
    Index("ix_submissions_site", "site"),
)

# Per-pilot credentials (tq.client.credentials): the SHA-256 of each secret, never the secret; the
# site it is bound to; revocable, optionally expiring, optionally bound to the batch job carrying
# it.
credentials = Table(
    "credentials",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("site", String(200), nullable=False),
    Column("secret_hash", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=True),
    Column("revoked_at", Float, nullable=True),
    Column("note", String(200), nullable=False),
    Column("batch_id", String(200), nullable=True),
    UniqueConstraint("secret_hash", name="uq_credentials_secret_hash"),
    Index("ix_credentials_batch", "batch_id"),
)
