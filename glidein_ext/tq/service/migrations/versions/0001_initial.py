"""The first schema of the Task Queue: workflows, tasks, files, pilots, completions, submissions.

Revision ID: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workflows",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("submitted_at", sa.Float, nullable=False),
    )
    op.create_table(
        "tasks",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("workflow_id", sa.Integer, sa.ForeignKey("workflows.id"), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("command", sa.Text, nullable=False),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("inputs", sa.Text, nullable=False),
        sa.Column("outputs", sa.Text, nullable=False),
        sa.Column("after", sa.Text, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("max_retries", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("failures", sa.Integer, nullable=False),
        sa.Column("pilot_id", sa.Integer, nullable=True),
        sa.Column("runnable_since", sa.Float, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("report", sa.Text, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.UniqueConstraint("workflow_id", "name", name="uq_tasks_workflow_name"),
    )
    op.create_index("ix_tasks_state", "tasks", ["state"])
    op.create_table(
        "task_inputs",
        sa.Column("task_id", sa.Integer, sa.ForeignKey("tasks.id"), primary_key=True),
        sa.Column("lfn", sa.String(1024), primary_key=True),
    )
    op.create_index("ix_task_inputs_lfn", "task_inputs", ["lfn"])
    op.create_table(
        "task_after",
        sa.Column("task_id", sa.Integer, sa.ForeignKey("tasks.id"), primary_key=True),
        sa.Column("after_id", sa.Integer, sa.ForeignKey("tasks.id"), primary_key=True),
    )
    op.create_index("ix_task_after_after", "task_after", ["after_id"])
    op.create_table(
        "files",
        sa.Column("lfn", sa.String(1024), primary_key=True),
        sa.Column("produced_by", sa.Integer, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "pilots",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("site", sa.String(200), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("se", sa.String(255), nullable=False),
        sa.Column("cpus", sa.Integer, nullable=False),
        sa.Column("memory", sa.Integer, nullable=False),
        sa.Column("disk", sa.Integer, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=True),
        sa.Column("attributes", sa.Text, nullable=False),
        sa.Column("requirements", sa.Text, nullable=False),
        sa.Column("rank", sa.Text, nullable=False),
        sa.Column("cache_dir", sa.Text, nullable=False),
        sa.Column("cached", sa.Text, nullable=False),
        sa.Column("batch_id", sa.String(200), nullable=True),
        sa.Column("dht_id", sa.String(80), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("task_id", sa.Integer, nullable=True),
        sa.Column("registered_at", sa.Float, nullable=False),
        sa.Column("last_seen", sa.Float, nullable=False),
    )
    op.create_index("ix_pilots_state", "pilots", ["state"])
    op.create_index("ix_pilots_host", "pilots", ["host"])
    op.create_table(
        "completions",
        sa.Column("task_id", sa.Integer, sa.ForeignKey("tasks.id"), primary_key=True),
        sa.Column("attempt", sa.Integer, primary_key=True),
        sa.Column("pilot_id", sa.Integer, nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=False),
        sa.Column("ok", sa.Integer, nullable=False),
        sa.Column("at", sa.Float, nullable=False),
    )
    op.create_table(
        "submissions",
        sa.Column("batch_id", sa.String(200), primary_key=True),
        sa.Column("site", sa.String(200), nullable=False),
        sa.Column("submitted_at", sa.Float, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
    )
    op.create_index("ix_submissions_site", "submissions", ["site"])


def downgrade() -> None:
    for name in ("submissions", "completions", "pilots", "files", "task_after", "task_inputs"):
        op.drop_table(name)
    op.drop_table("tasks")
    op.drop_table("workflows")
