"""Hardening: ``task_outputs``, who produces which LFN, so that a second producer is
refused at submit; filled from the tasks already stored.

Revision ID: 0002_hardening
Revises: 0001
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0002_hardening"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    outputs = op.create_table(
        "task_outputs",
        sa.Column("task_id", sa.Integer, sa.ForeignKey("tasks.id"), primary_key=True),
        sa.Column("lfn", sa.String(1024), primary_key=True),
    )
    op.create_index("ix_task_outputs_lfn", "task_outputs", ["lfn"])
    conn = op.get_bind()
    rows = [
        {"task_id": task_id, "lfn": lfn}
        for task_id, text in conn.execute(sa.text("SELECT id, outputs FROM tasks"))
        for lfn in sorted(set(json.loads(text)))
    ]
    if rows:
        op.bulk_insert(outputs, rows)


def downgrade() -> None:
    op.drop_index("ix_task_outputs_lfn", "task_outputs")
    op.drop_table("task_outputs")
