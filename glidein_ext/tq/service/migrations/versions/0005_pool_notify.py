"""A pool of Task Queue instances on one PostgreSQL database (Lee 2003, 4.2 notify):
triggers that announce every change the instances' matchers care about on the channel
``glidein_ext_tq``, after the commit and only if it commits.

A task's row is announced when it is stored queued and whenever its state or ``runnable_since``
changes (submitted, released, taken, completed, requeued); a pilot's when it registers and
whenever its state or cache list changes (idle/busy, left, lost).  The payload is
``<kind><id> <state> <origin>``: the kind ``t`` (a task), ``P`` (a pilot to re-read: new, or its
cache changed) or ``p`` (a pilot whose state alone changed), the row's new state, and the
``application_name`` of the session that made the change (each TQ instance names its sessions, so
it can skip its own news).  With the state in the payload, a listener re-reads only what it
cannot know otherwise: a queued task, a new pilot, a changed cache.  PostgreSQL folds identical
notifications of one transaction into one.  SQLite (one instance) gets nothing: no-op.

Also two indexes the pool's throughput needs (both engines): tasks (workflow_id, state), since
whether a workflow still has unfinished tasks is asked at every completion, and files
(produced_by), since every completion marks the site of the files it produced; neither may cost a
scan.

Revision ID: 0005_pool_notify
Revises: 0004_credentials
"""

from __future__ import annotations

from alembic import op

revision = "0005_pool_notify"
down_revision = "0004_credentials"
branch_labels = None
depends_on = None

CHANNEL = "glidein_ext_tq"

FUNCTION = f"""
CREATE OR REPLACE FUNCTION glidein_ext_tq_notify() RETURNS trigger AS $$
BEGIN
  PERFORM pg_notify('{CHANNEL}', TG_ARGV[0] || NEW.id::text || ' ' || NEW.state || ' '
    || coalesce(current_setting('application_name', true), ''));
  RETURN NULL;
END
$$ LANGUAGE plpgsql
"""

STATE_CHANGED = "OLD.state IS DISTINCT FROM NEW.state"
CACHE_CHANGED = "OLD.cached IS DISTINCT FROM NEW.cached"
TRIGGERS = (
    ("tasks_pool_insert", "INSERT ON tasks", "NEW.state = 'queued'", "t"),
    (
        "tasks_pool_update",
        "UPDATE ON tasks",
        f"{STATE_CHANGED} OR OLD.runnable_since IS DISTINCT FROM NEW.runnable_since",
        "t",
    ),
    ("pilots_pool_insert", "INSERT ON pilots", "true", "P"),
    ("pilots_pool_cache", "UPDATE ON pilots", CACHE_CHANGED, "P"),
    ("pilots_pool_state", "UPDATE ON pilots", f"{STATE_CHANGED} AND NOT ({CACHE_CHANGED})", "p"),
)


def upgrade() -> None:
    op.create_index("ix_tasks_workflow_state", "tasks", ["workflow_id", "state"])
    op.create_index("ix_files_produced_by", "files", ["produced_by"])
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(FUNCTION)
    for name, event, when, kind in TRIGGERS:
        table = event.split()[-1]
        op.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
        op.execute(
            f"CREATE TRIGGER {name} AFTER {event} FOR EACH ROW WHEN ({when}) "
            f"EXECUTE FUNCTION glidein_ext_tq_notify('{kind}')"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name, event, _when, _kind in TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON {event.split()[-1]}")
        op.execute("DROP FUNCTION IF EXISTS glidein_ext_tq_notify()")
    op.drop_index("ix_files_produced_by", "files")
    op.drop_index("ix_tasks_workflow_state", "tasks")
